// Package controlplane runs a real etcd and kube-apiserver for integration tests, and on
// request a real kube-controller-manager that runs the EndpointSlice controller alone
// (StartControllerManager).
//
// Each control plane listens on free loopback ports only, uses throwaway certificates
// and keys made for it in a temporary directory, and authorizes requests with RBAC, so
// tests can act as an admin, as any user and groups, or as a ServiceAccount. The binaries
// are built by `make tools` into hack/tools/bin (or found in $BAREMETAL_TEST_BINDIR),
// which also holds the kube-proxy that package kubeproxy runs (Binary finds it).
//
// Most test packages share one control plane through RunTests and Shared:
//
//	func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }
//
//	func TestSomething(t *testing.T) {
//		cp := controlplane.Shared(t)
//		client := kubernetes.NewForConfigOrDie(cp.AdminConfig())
//		...
//	}
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// ServiceClusterIPRanges are the dual-stack Service CIDRs of every control plane: IPv4
// first, so single-stack Services without an ipFamilies field get IPv4.
const ServiceClusterIPRanges = "10.96.0.0/16,fd00:10:96::/112"

// KubernetesServiceIPv4 and KubernetesServiceIPv6 are the ClusterIPs of the kubernetes
// Service, the first of each range, which kube-apiserver's serving certificate names.
const (
	KubernetesServiceIPv4 = "10.96.0.1"
	KubernetesServiceIPv6 = "fd00:10:96::1"
)

const (
	defaultStartTimeout = 60 * time.Second
	// kube-apiserver drains requests and closes watches on SIGTERM, which takes well
	// under a second here; the grace only bounds a hung shutdown.
	apiserverStopGrace = 30 * time.Second
	etcdStopGrace      = 10 * time.Second
	// Lines of a child's log that a start error quotes.
	logTailLines = 30
	// A free port found by listening on :0 can be taken by someone else before the
	// child binds it; starting over on new ports is cheaper than avoiding that race.
	startAttempts = 3
)

// ControlPlane is a running etcd and kube-apiserver, and any kube-controller-manager
// started with StartControllerManager. Its methods are safe for concurrent use.
type ControlPlane struct {
	dir       *lockedTempDir
	etcd      *process.Process
	apiserver *process.Process
	// apiserverBin and apiserverArgs start kube-apiserver again after KillAPIServer.
	apiserverBin  string
	apiserverArgs []string

	host     string
	clientCA *certificateAuthority
	servCA   []byte // PEM of the CA that signed kube-apiserver's serving certificate
	admin    *rest.Config

	stopOnce sync.Once
	stopErr  error
	killed   atomic.Bool // the API server was killed on purpose

	mu sync.Mutex
	// controllerManagers are those StartControllerManager started, which Stop stops
	// first.
	controllerManagers []*ControllerManager
	stopping           bool // Stop has begun: start no more controller managers
}

// Option changes how Start runs the control plane.
type Option func(*options)

type options struct {
	startTimeout   time.Duration
	apiserverFlags map[string]string
	servingIPs     []net.IP
}

// WithStartTimeout bounds how long Start waits for the control plane to be ready.
// The default is one minute.
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.startTimeout = d }
}

// WithAPIServerFlag passes --name=value to kube-apiserver in place of the value Start
// would pass otherwise; an empty value drops the flag. Use it for feature gates,
// admission plugins and the like.
func WithAPIServerFlag(name, value string) Option {
	return func(o *options) { o.apiserverFlags[name] = value }
}

// WithServingIP makes kube-apiserver's certificate valid for ip too: an address it is
// reached at through a forwarder, by clients that check the certificate against the
// address they dial (those that override a kubeconfig's server drop its tls-server-name).
func WithServingIP(ip netip.Addr) Option {
	return func(o *options) { o.servingIPs = append(o.servingIPs, ip.AsSlice()) }
}

// Start starts etcd and then kube-apiserver, and returns once kube-apiserver reports
// ready and the default namespace exists. ctx bounds only the start: the control plane
// runs until Stop. A missing binary gives an error wrapping ErrBinaryNotFound.
func Start(ctx context.Context, opts ...Option) (*ControlPlane, error) {
	o := options{startTimeout: defaultStartTimeout, apiserverFlags: map[string]string{}}
	for _, opt := range opts {
		opt(&o)
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.startTimeout)
	defer cancel()

	return retryPortTaken(func() (*ControlPlane, error) { return start(ctx, bins, o) })
}

// errPortTaken marks a start that failed because a child lost the race for its port.
var errPortTaken = errors.New("port taken")

// retryPortTaken calls start until it succeeds, fails for another reason than
// errPortTaken, or has been tried startAttempts times: the free port a child is given can
// be taken by another process before the child binds it.
func retryPortTaken[T any](start func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := start()
		if err == nil || !errors.Is(err, errPortTaken) || attempt == startAttempts {
			return v, err
		}
	}
}

// componentKubeconfig writes a kubeconfig for user, with a client certificate of its
// own, into c's directory and returns its path; name is the program that reads it.
func (c *ControlPlane) componentKubeconfig(user, name string) (string, error) {
	config, err := c.UserConfig(user)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(c.dir.path, name+"-*.kubeconfig")
	if err != nil {
		return "", fmt.Errorf("create %s kubeconfig: %w", name, err)
	}
	f.Close()
	if err := writeKubeconfig(config, f.Name()); err != nil {
		return "", err
	}
	return f.Name(), nil
}

func start(ctx context.Context, bins binaries, o options) (_ *ControlPlane, err error) {
	dir, err := makeLockedTempDir()
	if err != nil {
		return nil, err
	}
	c := &ControlPlane{dir: dir}
	defer func() {
		if err != nil {
			// The start error already quotes the logs; a failed stop adds nothing.
			_ = c.Stop()
		}
	}()

	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClientPort, etcdPeerPort, apiserverPort := ports[0], ports[1], ports[2]

	if c.etcd, err = startEtcd(bins.etcd, dir.path, etcdClientPort, etcdPeerPort); err != nil {
		return nil, err
	}
	if err := waitForEtcd(ctx, c.etcd, etcdClientPort); err != nil {
		return nil, err
	}

	flags, err := c.writePKI(o.servingIPs)
	if err != nil {
		return nil, err
	}
	flags["secure-port"] = strconv.Itoa(apiserverPort)
	flags["etcd-servers"] = "http://" + loopbackAddress(etcdClientPort)
	for name, value := range o.apiserverFlags {
		flags[name] = value
	}
	c.apiserverBin, c.apiserverArgs = bins.apiserver, commandLine(flags)
	if c.apiserver, err = process.Start("kube-apiserver", c.apiserverBin, c.apiserverArgs...); err != nil {
		return nil, err
	}

	c.host = "https://" + loopbackAddress(apiserverPort)
	if c.admin, err = c.UserConfig("admin", "system:masters"); err != nil {
		return nil, err
	}
	if err := c.waitForAPIServer(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func startEtcd(path, dir string, clientPort, peerPort int) (*process.Process, error) {
	clientURL := "http://" + loopbackAddress(clientPort)
	peerURL := "http://" + loopbackAddress(peerPort)
	return process.Start("etcd", path,
		"--name=controlplane",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=controlplane="+peerURL,
		// The data is thrown away after the test; waiting for the disk is not.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
}

// writePKI makes the control plane's certificates and keys, writes what kube-apiserver
// reads to the control plane directory, and returns kube-apiserver's flags. Its serving
// certificate is for its loopback addresses, the kubernetes Service's, and also.
func (c *ControlPlane) writePKI(also []net.IP) (map[string]string, error) {
	servingCA, err := newCertificateAuthority("baremetal-test-serving-ca")
	if err != nil {
		return nil, err
	}
	// The first address of each Service range is the kubernetes Service's ClusterIP, which
	// pods reach the API server at, as in a cluster.
	serving, err := servingCA.issueServing("kube-apiserver",
		append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(KubernetesServiceIPv4), net.ParseIP(KubernetesServiceIPv6)}, also...),
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	if c.clientCA, err = newCertificateAuthority("baremetal-test-client-ca"); err != nil {
		return nil, err
	}
	signer, err := newKey()
	if err != nil {
		return nil, err
	}
	signerPEM, err := encodeKey(signer)
	if err != nil {
		return nil, err
	}
	verifierPEM, err := encodePublicKey(signer.Public())
	if err != nil {
		return nil, err
	}
	c.servCA = servingCA.certPEM

	files := map[string][]byte{
		"serving.crt":    serving.certPEM,
		"serving.key":    serving.keyPEM,
		"client-ca.crt":  c.clientCA.certPEM,
		"sa-signing.key": signerPEM,
		"sa-verify.pub":  verifierPEM,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(c.dir.path, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	file := func(name string) string { return filepath.Join(c.dir.path, name) }

	return map[string]string{
		// Without these kube-apiserver looks for a non-loopback interface to advertise and
		// keeps the "kubernetes" Service's endpoints pointing at it: neither exists in a
		// loopback-only network namespace.
		"advertise-address":        "127.0.0.1",
		"bind-address":             "127.0.0.1",
		"endpoint-reconciler-type": "none",

		"service-cluster-ip-range": ServiceClusterIPRanges,
		"authorization-mode":       "RBAC",
		"tls-cert-file":            file("serving.crt"),
		"tls-private-key-file":     file("serving.key"),
		"client-ca-file":           file("client-ca.crt"),

		// TokenRequest needs an issuer and a signing key. The verification key has a
		// file of its own because kube-apiserver reads an ECDSA private key there only
		// in SEC 1 encoding, not in the PKCS #8 that the signing key is in.
		"service-account-issuer":           "https://kubernetes.default.svc.cluster.local",
		"service-account-signing-key-file": file("sa-signing.key"),
		"service-account-key-file":         file("sa-verify.pub"),
		// No controller-manager runs, so no namespace gets its "default" ServiceAccount,
		// and the plugin would refuse every Pod for lack of it.
		"disable-admission-plugins": "ServiceAccount",
	}, nil
}

// waitForEtcd waits until etcd answers its health check, so that a broken etcd is
// reported as such and not as a kube-apiserver that never got ready.
func waitForEtcd(ctx context.Context, etcd *process.Process, port int) error {
	url := "http://" + loopbackAddress(port) + "/health"
	var lastErr error
	for {
		lastErr = checkEtcdHealth(ctx, url)
		if lastErr == nil {
			return nil
		}
		select {
		case <-etcd.Exited():
			return startError(etcd, "etcd exited before ready: %s", exitStatus(etcd))
		case <-ctx.Done():
			return startError(etcd, "etcd not ready: %v (last health check: %v)", context.Cause(ctx), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func checkEtcdHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitForAPIServer waits until /readyz passes and the default namespace exists: the
// namespace is created by a controller inside kube-apiserver that readiness does not
// wait for.
func (c *ControlPlane) waitForAPIServer(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		return fmt.Errorf("create admin client: %w", err)
	}
	var lastErr error
	for {
		lastErr = checkAPIServer(ctx, client)
		if lastErr == nil {
			return nil
		}
		select {
		case <-c.apiserver.Exited():
			return startError(c.apiserver, "kube-apiserver exited before ready: %s", exitStatus(c.apiserver))
		case <-c.etcd.Exited():
			return startError(c.etcd, "etcd exited while kube-apiserver was starting: %s", exitStatus(c.etcd))
		case <-ctx.Done():
			return startError(c.apiserver, "kube-apiserver not ready: %v (last check: %v)", context.Cause(ctx), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func checkAPIServer(ctx context.Context, client kubernetes.Interface) error {
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		// A failed /readyz lists its checks with [-] for the failing ones.
		var failing []string
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, "[-]") {
				failing = append(failing, strings.TrimSpace(line))
			}
		}
		if len(failing) > 0 {
			return fmt.Errorf("/readyz: %s", strings.Join(failing, "; "))
		}
		return fmt.Errorf("/readyz: %w", err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("get namespace default: %w", err)
	}
	return nil
}

// startError describes a failed start with the end of the log of the process at fault.
func startError(p *process.Process, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	tail := p.Tail(logTailLines)
	if strings.Contains(tail, "address already in use") {
		err = fmt.Errorf("%w (%w)", err, errPortTaken)
	}
	return fmt.Errorf("%w\n--- last %d lines of the %s log ---\n%s", err, logTailLines, p.Name(), tail)
}

// exitStatus describes how p, which has exited, did so, "exit status 0" included.
func exitStatus(p *process.Process) string {
	if err := p.ExitError(); err != nil {
		return err.Error()
	}
	return "exit status 0"
}

// AdminConfig returns a new config for a cluster admin (user "admin" in group
// system:masters), which RBAC lets do anything.
func (c *ControlPlane) AdminConfig() *rest.Config {
	return rest.CopyConfig(c.admin)
}

// UserConfig returns a new config that authenticates as user, a member of groups, with a
// client certificate. Such a user may do only what RBAC grants it, its groups, or
// system:authenticated, which is how tests check the project's roles.
func (c *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	cert, err := c.clientCA.issueClient(user, groups)
	if err != nil {
		return nil, fmt.Errorf("issue client certificate for %q: %w", user, err)
	}
	config := c.anonymousConfig()
	config.CertData = cert.certPEM
	config.KeyData = cert.keyPEM
	return config, nil
}

// ServiceAccountConfig returns a new config that authenticates as the ServiceAccount
// namespace/name with a token from the TokenRequest API, valid for an hour. The
// ServiceAccount must exist: no controller creates the "default" ones.
func (c *ControlPlane) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		return nil, fmt.Errorf("create admin client: %w", err)
	}
	expiration := int64(time.Hour / time.Second)
	token, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiration},
	}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("request token for ServiceAccount %s/%s: it does not exist: %w", namespace, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("request token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	config := c.anonymousConfig()
	config.BearerToken = token.Status.Token
	return config, nil
}

// anonymousConfig trusts kube-apiserver's serving certificate and carries no
// credentials.
func (c *ControlPlane) anonymousConfig() *rest.Config {
	return &rest.Config{
		Host:            c.host,
		TLSClientConfig: rest.TLSClientConfig{CAData: slices.Clone(c.servCA)},
		// client-go's default of 5 requests a second would make the tests wait on the
		// client, not on the server they are testing.
		QPS:   1000,
		Burst: 2000,
	}
}

// Logs returns everything etcd, kube-apiserver and the controller managers have printed
// so far, for a test to print when it fails.
func (c *ControlPlane) Logs() string {
	procs := []*process.Process{c.etcd, c.apiserver}
	c.mu.Lock()
	for _, m := range c.controllerManagers {
		procs = append(procs, m.p)
	}
	c.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "===== %s (pid %d) =====\n%s", p.Name(), p.Pid(), p.Logs())
	}
	return b.String()
}

// KillAPIServer kills kube-apiserver with SIGKILL, as a crash would, and leaves etcd
// running; Stop then stops the rest.
func (c *ControlPlane) KillAPIServer() error {
	c.killed.Store(true)
	return c.apiserver.Kill()
}

// RestartAPIServer starts kube-apiserver again after KillAPIServer, on the same port and
// etcd, and waits until it serves.
func (c *ControlPlane) RestartAPIServer(ctx context.Context) error {
	p, err := process.Start("kube-apiserver", c.apiserverBin, c.apiserverArgs...)
	if err != nil {
		return err
	}
	c.apiserver = p
	c.killed.Store(false)
	return c.waitForAPIServer(ctx)
}

// Stop stops the controller managers still running, kube-apiserver, then etcd, and
// removes the control plane's directory. kube-apiserver goes first and is waited for
// because one whose etcd vanishes under it hangs retrying rather than exiting. Stop
// reports a child that had to be killed or had exited before, and returns the same
// answer if called again.
func (c *ControlPlane) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		c.mu.Lock()
		c.stopping = true
		managers := c.controllerManagers
		c.mu.Unlock()
		for _, m := range managers {
			// What the Stop of one stopped before said went to its caller already.
			if m.stopped.CompareAndSwap(false, true) {
				errs = append(errs, m.Stop())
			}
		}
		if c.apiserver != nil && !c.killed.Load() {
			errs = append(errs, c.apiserver.Stop(apiserverStopGrace))
		}
		if c.etcd != nil {
			errs = append(errs, c.etcd.Stop(etcdStopGrace))
		}
		errs = append(errs, c.dir.remove())
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// freePorts returns n distinct loopback ports that were free a moment ago. All n
// listeners stay open until the end, or the kernel could hand out one port twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func loopbackAddress(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// commandLine turns flags into arguments in a stable order, so logs of two runs compare.
func commandLine(flags map[string]string) []string {
	var args []string
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		if value := flags[name]; value != "" {
			args = append(args, "--"+name+"="+value)
		}
	}
	return args
}
