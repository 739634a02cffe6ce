package config

import (
	"context"
	"crypto/sha256"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// Watch checks the cloud-config file at path every interval and calls apply with each
// changed, valid config, so that the ccm and the agent follow an updated file without a
// restart. It blocks until ctx ends; apply runs on its goroutine, one call at a time.
//
// A file counts as changed when its bytes differ from those current was parsed from, then
// from the last reading: a file changed after the caller loaded it, even long before Watch
// starts (a ccm replica that leads hours after it started), is applied at the first check.
// A file that does not parse is logged once, with every problem, and the last good config
// stays in use. An interval that is not positive turns the checks off after the first.
//
// The outcomes are counted in the metrics of Metrics.
func Watch(ctx context.Context, path string, interval time.Duration, current *Config, apply func(*Config)) {
	r := &reloader{path: path, apply: apply, digest: current.digest, valid: true}
	r.check()
	if interval <= 0 {
		klog.InfoS("Not watching the cloud-config for changes", "path", path, "interval", interval)
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.check()
		}
	}
}

// reloader is what Watch knows of the file between two checks.
type reloader struct {
	path  string
	apply func(*Config)

	digest  [sha256.Size]byte // of the file as last read, or as the config in use was parsed from
	valid   bool              // the file as last read parsed
	readErr string            // why the last reading failed, empty after a good one
}

// check reads the file once, and applies it if it changed and is valid.
func (r *reloader) check() {
	// Through path every time, never a file kept open or a resolved name: a ConfigMap
	// volume updates by swapping a symlink, so each update is a new file at path.
	data, err := os.ReadFile(r.path)
	if err != nil {
		lastReloadSuccessful.Set(0)
		// Once per failure, not at every check while it lasts.
		if err.Error() != r.readErr {
			r.readErr = err.Error()
			reloadsTotal.WithLabelValues(resultUnreadable).Inc()
			klog.ErrorS(err, "Cannot read the cloud-config; keeping the last good one", "path", r.path)
		}
		return
	}
	if r.readErr != "" {
		r.readErr = ""
		klog.InfoS("The cloud-config can be read again", "path", r.path)
	}
	if sha256.Sum256(data) == r.digest {
		setSuccessful(r.valid) // back from a failed reading
		return
	}
	cfg, err := Parse(r.path, data)
	r.digest = cfg.digestOr(data)
	r.valid = err == nil
	setSuccessful(r.valid)
	switch {
	case err != nil:
		reloadsTotal.WithLabelValues(resultInvalid).Inc()
		klog.ErrorS(err, "The cloud-config is not valid; keeping the last good one", "path", r.path)
	default:
		reloadsTotal.WithLabelValues(resultApplied).Inc()
		klog.InfoS("Applying the changed cloud-config", "path", r.path, "pools", len(cfg.Pools))
		r.apply(cfg)
	}
}

func setSuccessful(ok bool) {
	if ok {
		lastReloadSuccessful.Set(1)
	} else {
		lastReloadSuccessful.Set(0)
	}
}
