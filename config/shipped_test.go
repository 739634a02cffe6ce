package config

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"
)

// readmeYAML finds the README's YAML blocks that are whole cloud-configs.
var readmeYAML = regexp.MustCompile("(?ms)^```yaml\n(pools:.*?)^```")

// TestShippedConfigs parses every cloud-config the project ships, so that a rule added to
// the parser cannot leave one of them refused: the manifests', the chart's default values
// and the README's.
func TestShippedConfigs(t *testing.T) {
	configs := map[string][]byte{}
	for _, path := range []string{
		"example-cloud-config.yaml",
		"../manifests/base/cloud-config.yaml",
		"../manifests/example/cloud-config.yaml",
	} {
		configs[path] = read(t, path)
	}

	chart := "../charts/cloud-provider-baremetal/values.yaml"
	var values struct {
		CloudConfig struct {
			Config yaml.Node `yaml:"config"`
		} `yaml:"cloudConfig"`
	}
	if err := yaml.Unmarshal(read(t, chart), &values); err != nil {
		t.Fatalf("%s: %v", chart, err)
	}
	data, err := yaml.Marshal(&values.CloudConfig.Config)
	if err != nil {
		t.Fatalf("%s: cloudConfig.config: %v", chart, err)
	}
	configs[chart+": cloudConfig.config"] = data

	blocks := readmeYAML.FindAllSubmatch(read(t, "../README.md"), -1)
	if len(blocks) == 0 {
		t.Error("../README.md: no YAML block starting with pools: found; has the README changed?")
	}
	for i, m := range blocks {
		configs[fmt.Sprintf("../README.md, YAML block %d", i+1)] = m[1]
	}

	for name, data := range configs {
		if _, err := Parse(name, data); err != nil {
			t.Errorf("a shipped cloud-config is refused: %v", err)
		}
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
