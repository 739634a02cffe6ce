package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/module"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
)

// Blocks are the shell blocks of the Install section of docs/install.md that tests run
// as an operator would.
type Blocks struct {
	// ProbeKey creates the namespace and the probe and verdict key Secrets (step 3).
	ProbeKey string
	// Apply checks the release, has $EDITOR put the cloud-config into install.yaml,
	// applies it and waits for the rollouts.
	Apply string
	// Uninstall deletes what install.yaml made.
	Uninstall string
}

// shBlock matches a fenced sh block of a Markdown page.
var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// ReadBlocks reads the blocks of the Install section of docs/install.md.
func ReadBlocks() (Blocks, error) {
	root, err := render.ManifestsDir()
	if err != nil {
		return Blocks{}, err
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(root), "docs", "install.md"))
	if err != nil {
		return Blocks{}, err
	}
	section := string(data)
	start := strings.Index(section, "\n## Install\n")
	if start < 0 {
		return Blocks{}, errors.New("docs/install.md has no Install section")
	}
	section = section[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var b Blocks
	for _, m := range shBlock.FindAllStringSubmatch(section, -1) {
		block := m[1]
		switch {
		case strings.Contains(block, "create secret generic baremetal-probe-key"):
			b.ProbeKey = block
		case strings.Contains(block, "kubectl apply -f install.yaml"):
			b.Apply = block
		case strings.Contains(block, "kubectl delete -f install.yaml"):
			b.Uninstall = block
		}
	}
	if b.ProbeKey == "" || b.Apply == "" || b.Uninstall == "" {
		return Blocks{}, fmt.Errorf("docs/install.md's Install section lacks a block of the probe key, kubectl apply or kubectl delete: %+v", b)
	}
	return b, nil
}

// ShellForTest returns a function that runs a block of docs/install.md with sh -e in dir,
// with the tools module's kubectl on PATH, the kubeconfig given and editor as $EDITOR.
// The block failing fails the test.
func ShellForTest(t testing.TB, dir, kubeconfig, editor string) func(testing.TB, string) {
	t.Helper()
	bin, err := module.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return func(t testing.TB, block string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-ex", "-c", block)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig, "EDITOR="+editor)
		out, err := cmd.CombinedOutput()
		t.Logf("docs/install.md's\n%s\n%s", block, out)
		if err != nil {
			t.Fatalf("docs/install.md's commands failed: %v", err)
		}
	}
}

// editorEnv, set to the path of a cloud-config, makes a test binary whose TestMain calls
// RunEditor an $EDITOR that puts that cloud-config into the install.yaml it is given.
const editorEnv = "BAREMETAL_TEST_EDIT_INSTALL"

// EditorForTest returns an $EDITOR for the Apply block that puts config into install.yaml,
// as an operator does by hand: the test binary itself, whose TestMain must call
// RunEditor first.
func EditorForTest(t testing.TB, config string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "cloud-config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	editor := filepath.Join(dir, "editor")
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=%q %q \"$@\"\n", editorEnv, path, self)
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return editor
}

// RunEditor does, in a test binary's TestMain, the editing of EditorForTest and exits
// when the binary runs as that editor, and returns otherwise.
func RunEditor() {
	config := os.Getenv(editorEnv)
	if config == "" {
		return
	}
	data, err := os.ReadFile(config)
	if err == nil {
		err = SetCloudConfig(os.Args[len(os.Args)-1], string(data))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// SetCloudConfig puts config into the ConfigMap cloud-config-<hash> of the install.yaml
// at path: what the page's `$EDITOR install.yaml` asks of an operator.
func SetCloudConfig(path, config string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs := strings.Split(string(data), "\n---\n")
	edited := false
	for i, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		if name, _ := meta["name"].(string); obj["kind"] != "ConfigMap" || !strings.HasPrefix(name, "cloud-config") {
			continue
		}
		obj["data"] = map[string]any{"cloud-config.yaml": config}
		out, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		docs[i], edited = string(out), true
	}
	if !edited {
		return fmt.Errorf("%s has no ConfigMap cloud-config-<hash>", path)
	}
	return os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644)
}
