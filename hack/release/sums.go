package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// sumsFile is the release's checksums file.
const sumsFile = "SHA256SUMS"

// writeSums writes dir/SHA256SUMS: a line "<sha256 in hex>  <name>" for every other file
// of dir, in name order, the format `sha256sum -c SHA256SUMS` checks.
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range entries {
		if e.Name() == sumsFile {
			continue
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file: a release holds files only", filepath.Join(dir, e.Name()))
		}
		sum, err := fileSum(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", sum, e.Name())
	}
	return os.WriteFile(filepath.Join(dir, sumsFile), []byte(b.String()), 0o644)
}

// fileSum is the sha256 of the file at path.
func fileSum(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h.Sum(nil), nil
}
