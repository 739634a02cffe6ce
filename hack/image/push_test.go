package main

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushArchive(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	s := stamp{version: "v1.2.3", revision: "0123456789abcdef0123456789abcdef01234567", created: time.Unix(1700000000, 0).UTC()}
	p := programs[0]
	out, built, err := buildArchive(p, fakeBinaries(t), "", testPlatforms, "registry.test/project", s)
	if err != nil {
		t.Fatal(err)
	}

	// Pushed under another name than the archive's: the registry is the caller's choice.
	ref := strings.TrimPrefix(srv.URL, "http://") + "/elsewhere/" + p.name + ":v1.2.3"
	pushed, err := pushArchive(context.Background(), out, ref)
	if err != nil {
		t.Fatal(err)
	}
	if pushed != built {
		t.Errorf("pushed index %s, built %s", pushed, built)
	}

	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if d, _ := idx.Digest(); d != built {
		t.Errorf("%s serves index %s, want %s", ref, d, built)
	}
	// What a node of each platform pulls.
	for _, plat := range testPlatforms {
		img, err := remote.Image(r, remote.WithPlatform(plat))
		if err != nil {
			t.Fatalf("pull %s for %s: %v", ref, plat, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := (v1.Platform{OS: cf.OS, Architecture: cf.Architecture}); got.String() != plat.String() {
			t.Errorf("%s for %s: image of %s", ref, plat, got)
		}
	}
}
