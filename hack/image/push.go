package main

import (
	"context"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pushArchive pushes the image index in the archive at path to ref, with the credentials
// of the docker config (docker login, podman login), and returns its digest. What is
// pushed is the archive's content, so the registry holds the digest that make images
// printed.
func pushArchive(ctx context.Context, path, ref string) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%s: %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "image-push-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	a, err := readArchive(path, dir)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := a.index.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := remote.WriteIndex(r, a.index, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s to %s: %w", path, ref, err)
	}
	return digest, nil
}
