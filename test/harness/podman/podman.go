// Package podman runs the project's container images in tests as a kubelet would run a
// Pod's container: from the OCI archives that `make images` writes, with the container's
// securityContext from the manifests, in the network namespace of a test node. It drives
// podman(1) with a storage of its own, so that tests neither see nor change the host's
// images and containers.
package podman

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// NamePrefix starts the name of every container the tests run: what an earlier run
// left behind (a test binary killed before its cleanup) is found and removed by it.
const NamePrefix = "baremetal-test-"

// Runtime is podman with the tests' own storage.
type Runtime struct {
	root string
}

// New returns the Runtime whose storage is under dir, a directory kept across runs (the
// images' layers are then loaded once), and removes the containers an earlier run left.
func New(ctx context.Context, dir string) (*Runtime, error) {
	for _, prog := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(prog); err != nil {
			return nil, fmt.Errorf("%s is needed to run the images (Debian: apt-get install podman runc): %w", prog, err)
		}
	}
	r := &Runtime{root: dir}
	for _, d := range []string{"storage", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := r.RemoveAll(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// globals are the options that point podman at the Runtime's storage and keep it from
// needing systemd.
func (r *Runtime) globals() []string {
	return []string{
		"--root=" + filepath.Join(r.root, "storage"),
		"--runroot=" + filepath.Join(r.root, "run"),
		"--cgroup-manager=cgroupfs",
		"--events-backend=file",
		// runc, not crun: the crun of Debian 12 refuses hosts with both cgroup versions
		// mounted, as many are.
		"--runtime=runc",
	}
}

// run runs podman with args and returns its standard output.
func (r *Runtime) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", append(r.globals(), args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

var loaded = regexp.MustCompile(`(?m)^Loaded image(?:\(s\))?: (\S+)`)

// Load loads the OCI archive at path and returns the name of the image it holds.
func (r *Runtime) Load(ctx context.Context, path string) (string, error) {
	out, err := r.run(ctx, "load", "--input="+path)
	if err != nil {
		return "", err
	}
	m := loaded.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("podman load %s: no image named in %q", path, out)
	}
	return m[1], nil
}

// Image is what the tests check of an image's configuration.
type Image struct {
	User       string
	Entrypoint []string
	Labels     map[string]string
	// Architecture is the image's, such as amd64.
	Architecture string
}

// Inspect returns the configuration of image.
func (r *Runtime) Inspect(ctx context.Context, image string) (Image, error) {
	out, err := r.run(ctx, "image", "inspect", image)
	if err != nil {
		return Image{}, err
	}
	var got []struct {
		Architecture string
		Config       struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 {
		return Image{}, fmt.Errorf("podman image inspect %s: %d images, %v", image, len(got), err)
	}
	c := got[0].Config
	return Image{User: c.User, Entrypoint: c.Entrypoint, Labels: c.Labels, Architecture: got[0].Architecture}, nil
}

// Container is a container to run.
type Container struct {
	// Name follows NamePrefix.
	Name  string
	Image string
	// Netns is the path of the network namespace to join, as /run/netns/<name>.
	Netns string
	// Files are mounted read-only at their own path, so that arguments naming them
	// need no change. They are made readable by every user, as the files of a kubelet's
	// Secret and ConfigMap volumes are (mode 0644), for a program that runs as non-root.
	Files []string
	Env   map[string]string
	Args  []string
	// Security is the container's securityContext in the manifests.
	Security *corev1.SecurityContext
	// StopGrace is how long podman waits after the stop signal before it kills the
	// container: the Pod's terminationGracePeriodSeconds.
	StopGrace time.Duration
}

// Command returns the command that runs c in the foreground, as `podman run --rm`:
// signals sent to it reach the container's program, and it exits with that program's
// status. Start it with process.StartCmd; call Remove once it has exited or the test
// ends, for a container whose podman was killed.
func (r *Runtime) Command(ctx context.Context, c Container) (*exec.Cmd, error) {
	if !strings.HasPrefix(c.Name, NamePrefix) {
		return nil, fmt.Errorf("container name %q does not start with %q", c.Name, NamePrefix)
	}
	security, err := r.securityFlags(ctx, c.Image, c.Security)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	args := append(r.globals(), "run", "--rm", "--replace", "--name="+c.Name,
		"--network=ns:"+c.Netns, "--pull=never",
		// Limits the container runtime may set on a host without CAP_SYS_RESOURCE:
		// podman's own defaults may be above them. The open files of the process that
		// starts it, as under containerd, and the processes podman documents as its
		// default (and applies only when asked).
		"--ulimit=nofile="+limit(unix.RLIMIT_NOFILE), "--ulimit=nproc=32768:32768",
		"--stop-timeout="+strconv.Itoa(int(c.StopGrace.Seconds())))
	args = append(args, security...)
	for _, f := range c.Files {
		if err := os.Chmod(f, 0o644); err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		args = append(args, "--volume="+f+":"+f+":ro")
	}
	for k, v := range c.Env {
		args = append(args, "--env="+k+"="+v)
	}
	args = append(append(args, c.Image), c.Args...)
	return exec.CommandContext(ctx, "podman", args...), nil
}

// limit returns this process's resource limit of kind as soft:hard.
func limit(kind int) string {
	var l unix.Rlimit
	if err := unix.Getrlimit(kind, &l); err != nil {
		return "1024:4096"
	}
	return strconv.FormatUint(l.Cur, 10) + ":" + strconv.FormatUint(l.Max, 10)
}

// securityFlags returns podman's options for sc, and checks what a kubelet checks
// before it starts a container: with runAsNonRoot, that the user is a non-zero uid.
func (r *Runtime) securityFlags(ctx context.Context, image string, sc *corev1.SecurityContext) ([]string, error) {
	// A kubelet mounts no tmpfs where the image has none, and gives no new privileges
	// only when asked.
	flags := []string{"--read-only-tmpfs=false"}
	if sc == nil {
		return flags, nil
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		flags = append(flags, "--read-only")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		flags = append(flags, "--security-opt=no-new-privileges")
	}
	if sc.Privileged != nil && *sc.Privileged {
		flags = append(flags, "--privileged")
	}
	if c := sc.Capabilities; c != nil {
		for _, d := range c.Drop {
			flags = append(flags, "--cap-drop="+strings.ToLower(string(d)))
		}
		for _, a := range c.Add {
			flags = append(flags, "--cap-add="+strings.ToLower(string(a)))
		}
	}
	user := ""
	if sc.RunAsUser != nil {
		user = strconv.FormatInt(*sc.RunAsUser, 10)
		if sc.RunAsGroup != nil {
			user += ":" + strconv.FormatInt(*sc.RunAsGroup, 10)
		}
		flags = append(flags, "--user="+user)
	}
	if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot {
		if user == "" {
			img, err := r.Inspect(ctx, image)
			if err != nil {
				return nil, err
			}
			user = img.User
		}
		uid, _, _ := strings.Cut(user, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			return nil, fmt.Errorf("runAsNonRoot, but image %s runs as user %q: a kubelet refuses a user that is not a non-zero uid", image, user)
		}
	}
	return flags, nil
}

// Pid returns the pid, on the host, of the program of the running container name.
func (r *Runtime) Pid(ctx context.Context, name string) (int, error) {
	out, err := r.run(ctx, "inspect", "--format={{.State.Pid}}", name)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("container %s: pid %q: not running", name, strings.TrimSpace(out))
	}
	return pid, nil
}

// Remove removes the container called name, running or not.
func (r *Runtime) Remove(ctx context.Context, name string) error {
	_, err := r.run(ctx, "rm", "--force", "--ignore", "--time=0", name)
	return err
}

// RemoveAll removes every container the tests started, running or not.
func (r *Runtime) RemoveAll(ctx context.Context) error {
	out, err := r.run(ctx, "ps", "--all", "--format={{.Names}}", "--filter=name=^"+NamePrefix)
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(out) {
		if err := r.Remove(ctx, name); err != nil {
			return err
		}
	}
	return nil
}
