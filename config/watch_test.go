package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
)

const (
	onePool  = "pools:\n- name: a\n  addresses: [198.51.100.0/24]\n"
	twoPools = onePool + "- name: b\n  addresses: [203.0.113.0/24]\n"
	badPools = "pools:\n- name: a\n  addresses: [198.51.100.0/33]\n"
)

// registerMetrics makes the metrics record: component-base metrics do nothing until
// registered.
var registerMetrics = sync.OnceFunc(func() { metrics.NewKubeRegistry().MustRegister(Metrics()...) })

// reloads returns the reloads counted so far, by result.
func reloads(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, result := range []string{resultApplied, resultInvalid, resultUnreadable} {
		v, err := testutil.GetCounterMetricValue(reloadsTotal.WithLabelValues(result))
		if err != nil {
			t.Fatal(err)
		}
		out[result] = v
	}
	return out
}

func successful(t *testing.T) float64 {
	t.Helper()
	v, err := testutil.GetGaugeMetricValue(lastReloadSuccessful)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// configMapDir lays a file out as a ConfigMap volume does: path is a symlink through
// ..data, and an update swaps ..data for a new directory in one rename.
type configMapDir struct {
	t       *testing.T
	dir     string
	version int
}

func newConfigMapDir(t *testing.T, content string) (*configMapDir, string) {
	d := &configMapDir{t: t, dir: t.TempDir()}
	d.update(content)
	path := filepath.Join(d.dir, "cloud.yaml")
	if err := os.Symlink(filepath.Join("..data", "cloud.yaml"), path); err != nil {
		t.Fatal(err)
	}
	return d, path
}

func (d *configMapDir) update(content string) {
	d.t.Helper()
	d.version++
	version := fmt.Sprintf("..v%d", d.version)
	if err := os.Mkdir(filepath.Join(d.dir, version), 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, version, "cloud.yaml"), []byte(content), 0o600); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func receive(t *testing.T, applied <-chan *Config) *Config {
	t.Helper()
	select {
	case cfg := <-applied:
		return cfg
	case <-time.After(10 * time.Second):
		t.Fatal("no config applied in 10s")
		return nil
	}
}

func TestWatch(t *testing.T) {
	registerMetrics()
	d, path := newConfigMapDir(t, onePool)
	applied := make(chan *Config, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	lastReloadSuccessful.Set(-1) // to see the first reading happen
	before := reloads(t)
	go func() {
		defer close(done)
		Watch(ctx, path, time.Millisecond, mustParse(t, onePool), func(cfg *Config) { applied <- cfg })
	}()
	waitFor(t, "the first reading", func() bool { return successful(t) == 1 })

	d.update(twoPools)
	if cfg := receive(t, applied); len(cfg.Pools) != 2 || cfg.Pool("b") == nil {
		t.Fatalf("applied %+v, want the two pools", cfg.Pools)
	}

	d.update(badPools)
	waitFor(t, "the invalid file to be seen", func() bool { return successful(t) == 0 })
	select {
	case cfg := <-applied:
		t.Fatalf("applied %+v: neither the unchanged file nor the invalid one may be", cfg.Pools)
	default:
	}

	d.update(onePool)
	if cfg := receive(t, applied); len(cfg.Pools) != 1 {
		t.Fatalf("applied %+v, want the one pool", cfg.Pools)
	}
	if got := successful(t); got != 1 {
		t.Errorf("last_reload_successful = %v after a good change, want 1", got)
	}
	after := reloads(t)
	for result, want := range map[string]float64{resultApplied: 2, resultInvalid: 1, resultUnreadable: 0} {
		if got := after[result] - before[result]; got != want {
			t.Errorf("reloads_total{result=%q} went up by %v, want %v", result, got, want)
		}
	}

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return once its context ended")
	}
}

// TestReloaderCheck follows the file one check at a time: what is applied, counted and
// logged.
func TestReloaderCheck(t *testing.T) {
	registerMetrics()
	var logged []string
	klog.SetLogger(funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{}))
	defer klog.ClearLogger()

	d, path := newConfigMapDir(t, onePool)
	var applied []*Config
	r := &reloader{path: path, apply: func(cfg *Config) { applied = append(applied, cfg) }, digest: mustParse(t, onePool).digest, valid: true}
	steps := []struct {
		name     string
		change   func()
		pools    int // pools of the config applied, 0 for none
		counted  string
		success  float64
		logsWith string // in the one line logged, empty for none
	}{
		{name: "first reading, the file the config in use came from", success: 1},
		{name: "unchanged", success: 1},
		{name: "valid change", change: func() { d.update(twoPools) }, pools: 2, counted: resultApplied, success: 1, logsWith: `"msg"="Applying the changed cloud-config" "path"="` + path + `" "pools"=2`},
		{name: "same bytes again", change: func() { d.update(twoPools) }, success: 1},
		{name: "invalid change", change: func() { d.update(badPools) }, counted: resultInvalid, success: 0,
			logsWith: `"msg"="The cloud-config is not valid; keeping the last good one" "error"="cloud-config ` + path + ` has 1 problem:\n  ` + path + `:3: pools[0].addresses[0]: invalid CIDR`},
		{name: "still invalid", success: 0},
		{name: "unreadable", change: func() {
			if err := os.Remove(filepath.Join(d.dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}, counted: resultUnreadable, success: 0, logsWith: `"msg"="Cannot read the cloud-config; keeping the last good one"`},
		{name: "still unreadable", success: 0},
		{name: "readable again, as invalid as before", change: func() {
			if err := os.Symlink(fmt.Sprintf("..v%d", d.version), filepath.Join(d.dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}, success: 0, logsWith: `"msg"="The cloud-config can be read again"`},
		{name: "another invalid change", change: func() { d.update("pools: []\n") }, counted: resultInvalid, success: 0, logsWith: "no pools"},
		{name: "valid again", change: func() { d.update(onePool) }, pools: 1, counted: resultApplied, success: 1, logsWith: `"pools"=1`},
		{name: "unchanged after all that", success: 1},
	}
	for _, step := range steps {
		if step.change != nil {
			step.change()
		}
		before, n, logs := reloads(t), len(applied), len(logged)
		r.check()

		switch {
		case step.pools == 0 && len(applied) != n:
			t.Errorf("%s: applied %+v, want nothing applied", step.name, applied[n].Pools)
		case step.pools != 0 && (len(applied) != n+1 || len(applied[n].Pools) != step.pools):
			t.Errorf("%s: applied %d configs, want one with %d pools", step.name, len(applied)-n, step.pools)
		}
		after := reloads(t)
		for result := range after {
			want := 0.0
			if result == step.counted {
				want = 1
			}
			if got := after[result] - before[result]; got != want {
				t.Errorf("%s: reloads_total{result=%q} went up by %v, want %v", step.name, result, got, want)
			}
		}
		if got := successful(t); got != step.success {
			t.Errorf("%s: last_reload_successful = %v, want %v", step.name, got, step.success)
		}
		switch {
		case step.logsWith == "" && len(logged) != logs:
			t.Errorf("%s: logged %q, want nothing", step.name, logged[logs:])
		case step.logsWith != "" && (len(logged) != logs+1 || !strings.Contains(logged[logs], step.logsWith)):
			t.Errorf("%s: logged %q, want one line with %q", step.name, logged[logs:], step.logsWith)
		}
	}
}

// TestWatchAppliesAChangeMadeBeforeItStarted checks that a file changed between the
// caller's load and the start of Watch (a ccm replica that leads long after it started)
// is applied at the first check.
func TestWatchAppliesAChangeMadeBeforeItStarted(t *testing.T) {
	d, path := newConfigMapDir(t, onePool)
	loaded := mustParse(t, onePool)
	d.update(twoPools)
	applied := make(chan *Config, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go Watch(ctx, path, time.Hour, loaded, func(cfg *Config) { applied <- cfg })
	if cfg := receive(t, applied); len(cfg.Pools) != 2 {
		t.Fatalf("applied %+v, want the two pools", cfg.Pools)
	}
}

func mustParse(t *testing.T, data string) *Config {
	t.Helper()
	cfg, err := Parse("loaded", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestWatchOff(t *testing.T) {
	_, path := newConfigMapDir(t, onePool)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, path, 0, mustParse(t, onePool), func(cfg *Config) { t.Errorf("applied %+v with the checks off", cfg.Pools) })
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return once its context ended")
	}
}
