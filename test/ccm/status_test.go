package ccm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chromiumPath is Debian's chromium, the browser the status page is checked in.
const chromiumPath = "/usr/bin/chromium"

// chromiumTimeout bounds one browser run: it starts in a second or two, but the machine
// also runs the control plane.
const chromiumTimeout = 90 * time.Second

// artifactsEnv names a directory for the files a test leaves for people to look at, such
// as the screenshot of the status page; without it they go to a temporary directory.
const artifactsEnv = "BAREMETAL_ARTIFACTS"

// TestStatus reads the leader's status page as an operator would: the JSON, the page in a
// real browser, and the answer of a standby.
func TestStatus(t *testing.T) {
	e := setup(t)
	addr := freeLoopbackAddress(t)
	e.startCCM(t, "--status-address="+addr)
	base := "http://" + addr

	ns := e.namespace(t)
	e.create(t, ns, lbService("status-web"))
	e.waitIngress(t, ns, "status-web", 1)
	e.setEndpoints(t, ns, "status-web", "node-b")
	e.waitAnnouncer(t, ns, "status-web", "node-b")
	service := ns + "/status-web"

	t.Run("json", func(t *testing.T) {
		var st struct {
			Leader   bool
			Services []struct{ Namespace, Name, Announcer, Why string }
			Agents   []struct{ Node, State, Address string }
		}
		poll.Until(t, 10*time.Second, func(ctx context.Context) (bool, string) {
			code, body, err := httpGet(ctx, base+"/status.json")
			if err != nil || code != http.StatusOK {
				return false, fmt.Sprintf("GET /status.json: %d %v %s", code, err, body)
			}
			if err := json.Unmarshal(body, &st); err != nil {
				return false, fmt.Sprintf("decode /status.json: %v\n%s", err, body)
			}
			agents := map[string]string{}
			for _, a := range st.Agents {
				agents[a.Node] = a.State
			}
			if !st.Leader || agents["node-a"] != "up" || agents["node-b"] != "up" {
				return false, fmt.Sprintf("/status.json does not show a leader with node-a and node-b up:\n%s", body)
			}
			for _, s := range st.Services {
				if s.Namespace+"/"+s.Name == service {
					return s.Announcer == "node-b" && s.Why != "", fmt.Sprintf("/status.json shows %s announced by %q because %q, want node-b and a reason", service, s.Announcer, s.Why)
				}
			}
			return false, fmt.Sprintf("/status.json lacks %s:\n%s", service, body)
		})
	})

	t.Run("standby", func(t *testing.T) {
		standby := "http://" + freeLoopbackAddress(t)
		e.startCCM(t, "--status-address="+strings.TrimPrefix(standby, "http://"))
		// It listens before it joins the leader election, which it does not win.
		poll.Until(t, 10*time.Second, func(ctx context.Context) (bool, string) {
			code, body, err := httpGet(ctx, standby+"/status.json")
			return err == nil && code == http.StatusServiceUnavailable && strings.Contains(string(body), `"message": "standby: not the leader"`),
				fmt.Sprintf("GET /status.json of the standby: %d %v %s", code, err, body)
		})
		if code, body, err := httpGet(t.Context(), standby+"/"); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(string(body), "standby: not the leader") {
			t.Errorf("GET / of the standby: %d %v %s", code, err, body)
		}
	})

	t.Run("browser", func(t *testing.T) {
		if _, err := os.Stat(chromiumPath); err != nil {
			msg := fmt.Sprintf("no browser to load the status page in (%v): install Debian's chromium (apt-get install chromium)", err)
			ci.Missing(t, "%s", msg)
		}
		dom := string(chromium(t, "--dump-dom", base+"/"))
		services, _, _ := strings.Cut(dom, `id="agents"`)
		_, services, _ = strings.Cut(services, `id="services"`)
		if row := tableRow(services, service); !strings.Contains(row, "node-b") {
			t.Errorf("the Services table has no row with %s and node-b: %q\npage:\n%s", service, row, dom)
		}

		dir := os.Getenv(artifactsEnv)
		if dir == "" {
			dir = t.TempDir()
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("create the artifacts directory $%s: %v", artifactsEnv, err)
		}
		shot := filepath.Join(dir, "status-page.png")
		chromium(t, "--screenshot="+shot, "--window-size=1280,900", base+"/")
		f, err := os.Open(shot)
		if err != nil {
			t.Fatalf("the browser wrote no screenshot: %v", err)
		}
		defer f.Close()
		cfg, err := png.DecodeConfig(f)
		if err != nil || cfg.Width != 1280 || cfg.Height != 900 {
			t.Errorf("screenshot %s: %dx%d, %v; want a 1280x900 PNG", shot, cfg.Width, cfg.Height, err)
		}
		t.Logf("screenshot of the status page: %s", shot)
	})
}

// freeLoopbackAddress returns 127.0.0.1:port with a port free a moment ago.
func freeLoopbackAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(ctx context.Context, url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// tableRow returns the first <tr> of page that contains text, or "".
func tableRow(page, text string) string {
	for _, row := range regexp.MustCompile(`(?s)<tr[ >].*?</tr>`).FindAllString(page, -1) {
		if strings.Contains(row, text) {
			return row
		}
	}
	return ""
}

// chromium runs the browser headless with a profile of its own, and returns what it
// printed on stdout. It is killed, with every helper process it started, when
// chromiumTimeout passes or the test ends.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), chromiumTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath, append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		// Nothing but the page: no update checks, sync or other calls home.
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(),
	}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A process group of its own, so that one signal reaches the renderer and the other
	// helpers too; and SIGKILL should the test binary die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the forking *thread* ends: lock it, and let it end with
		// this goroutine only once the browser is reaped (as package process does).
		runtime.LockOSThread()
		done <- cmd.Run()
	}()
	err := <-done
	if cmd.Process != nil {
		// Helpers that outlived the browser; ESRCH when there are none, as usual.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("chromium %s: %v after %v\n%s", strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), stderr.String())
	}
	t.Logf("chromium %s: %v", args[0], time.Since(start).Round(time.Millisecond))
	return stdout.Bytes()
}
