package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
)

// chartName is the chart's name, and its directory's under charts/.
const chartName = "cloud-provider-baremetal"

// packageChart packages the chart as a release's into dir with helm package: version
// without its v as the chart's version, version as its appVersion (the images' default
// tag), and in its values.yaml each program's image repository and digest, so that it
// runs the images install.yaml runs. It returns the package's path.
func packageChart(version string, images []image, dir string) (string, error) {
	src, err := render.ChartDir()
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp("", "baremetal-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	// helm package wants the directory named after the chart.
	chart := filepath.Join(work, chartName)
	if err := os.CopyFS(chart, os.DirFS(src)); err != nil {
		return "", fmt.Errorf("copy the chart: %w", err)
	}
	valuesFile := filepath.Join(chart, "values.yaml")
	values, err := os.ReadFile(valuesFile)
	if err != nil {
		return "", err
	}
	for _, img := range images {
		for key, value := range map[string]string{"repository": img.repository, "digest": img.digest} {
			if values, err = setValue(values, value, img.program.values, "image", key); err != nil {
				return "", fmt.Errorf("%s: %w", filepath.Join("charts", chartName, "values.yaml"), err)
			}
		}
	}
	if err := os.WriteFile(valuesFile, values, 0o644); err != nil {
		return "", err
	}
	if _, err := render.RunHelm("package", chart, "--version", chartVersion(version), "--app-version", version, "--destination", dir); err != nil {
		return "", err
	}
	out := filepath.Join(dir, chartName+"-"+chartVersion(version)+".tgz")
	if _, err := os.Stat(out); err != nil {
		return "", fmt.Errorf("helm package wrote no %s: %w", filepath.Base(out), err)
	}
	return out, nil
}

// setValue returns the YAML document doc with the scalar at path set to value. Only that
// scalar's text changes, so the comments that document the values stay as they are; the
// scalar must be alone on its line after its key.
func setValue(doc []byte, value string, path ...string) ([]byte, error) {
	node, err := lookup(doc, path)
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(doc, []byte("\n"))
	line := lines[node.Line-1]
	at := node.Column - 1
	var token string
	switch node.Style {
	case 0:
		token = node.Value
	case yaml.DoubleQuotedStyle:
		token = fmt.Sprintf("%q", node.Value)
	case yaml.SingleQuotedStyle:
		token = "'" + strings.ReplaceAll(node.Value, "'", "''") + "'"
	}
	if token == "" || string(bytes.TrimRight(line[at:], " \t\r")) != token {
		return nil, fmt.Errorf("line %d: %s is not a scalar alone after its key, which a release can set", node.Line, strings.Join(path, "."))
	}
	lines[node.Line-1] = append(line[:at:at], fmt.Sprintf("%q", value)...)
	out := bytes.Join(lines, []byte("\n"))
	// Read back: the value must be what was asked, at the place asked.
	if got, err := lookup(out, path); err != nil || got.Value != value {
		return nil, fmt.Errorf("line %d: setting %s to %q did not take (%v)", node.Line, strings.Join(path, "."), value, err)
	}
	return out, nil
}

// lookup returns the scalar node at path (mapping keys) in the YAML document doc.
func lookup(doc []byte, path []string) (*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return nil, errors.New("not one YAML document")
	}
	node := root.Content[0]
	for i, key := range path {
		var next *yaml.Node
		if node.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(node.Content); j += 2 {
				if node.Content[j].Value == key {
					next = node.Content[j+1]
				}
			}
		}
		if next == nil {
			return nil, fmt.Errorf("no %s", strings.Join(path[:i+1], "."))
		}
		node = next
	}
	if node.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("%s is not a scalar", strings.Join(path, "."))
	}
	return node, nil
}
