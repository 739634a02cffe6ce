package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// docYAML finds the YAML blocks of a Markdown page that are whole cloud-configs, also
// those indented in a list item.
var docYAML = regexp.MustCompile("(?ms)^( *)```yaml\n(( *)pools:.*?)^ *```")

// TestShippedConfigs parses every cloud-config the project ships, so that a rule added to
// the parser cannot leave one of them refused: the manifests', the chart's default values
// and the documentation's.
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

	for _, page := range []string{"../README.md", "../docs/install.md"} {
		blocks := docYAML.FindAllSubmatch(read(t, page), -1)
		if len(blocks) == 0 {
			t.Errorf("%s: no YAML block starting with pools: found; has the page changed?", page)
		}
		for i, m := range blocks {
			configs[fmt.Sprintf("%s, YAML block %d", page, i+1)] = dedent(m[2], len(m[1]))
		}
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

// dedent removes n spaces from the start of each line of b that has them: a block in a
// list item is indented as the item is.
func dedent(b []byte, n int) []byte {
	prefix := strings.Repeat(" ", n)
	var out []byte
	for line := range strings.Lines(string(b)) {
		out = append(out, strings.TrimPrefix(line, prefix)...)
	}
	return out
}
