// Package testbed assembles the whole product on one machine: a network of node
// namespaces (package netns) registered as Nodes of a real control plane, each running the
// real kube-proxy and the real baremetal-agent, pods (package pods) that Serve puts on
// them, the real EndpointSlice controller of kube-controller-manager, and the real
// baremetal-ccm in the bridge's namespace. A Service's traffic takes the path it takes in
// a cluster: the client resolves the address to the announcer's MAC, the announcer's
// kube-proxy hands it to a pod. The end-to-end tests, the failover benchmark and
// `make demo` are built on it. It needs root.
package testbed

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/kubeproxy"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/pods"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// ServicePort is where the pods of Serve listen, and the port of the Services the tests
// make for them.
const ServicePort = 8080

// AppLabel is the label Serve gives its pods, with the app's name: a Service selects them
// by it.
const AppLabel = "app.kubernetes.io/name"

// agentMetrics is the agents' metrics address, on each node's own loopback.
const agentMetrics = "127.0.0.1:7475"

// Cluster is a running testbed. Its methods are safe for concurrent use.
type Cluster struct {
	// Net is the network: Nodes, Client and Bridge.
	Net *netns.Network
	// ControlPlane is the API server the agents and the ccm use.
	ControlPlane *controlplane.ControlPlane
	// Admin is a client with every right.
	Admin kubernetes.Interface
	// Config is the path of the cloud-config file of the agents and the ccm.
	Config string
	// KeyFile is the path of the probe key the agents and the ccm share, and Key the key.
	KeyFile string
	Key     *probe.Key
	// VerdictKeyFile is the ccm's private key, which signs its verdicts and duty lists;
	// VerdictPublicKeyFile the agents' file of its public key; Signer the private key.
	VerdictKeyFile, VerdictPublicKeyFile string
	Signer                               *probe.Signer

	dir             string
	api             netip.AddrPort // the API server, as the namespaces reach it
	apiServerName   string         // the name in its serving certificate
	agentKubeconfig string
	agentBinary     string
	proxyKubeconfig string

	mu          sync.Mutex
	images      *Images
	agents      map[string]*process.Process
	kubeProxies map[string]*kubeproxy.KubeProxy
	pods        []*pods.Pod
	processes   []*process.Process
	// statusHosts are the namespaces a ccm was started in, for Status.
	statusHosts []*netns.Host
	closers     []func() error
}

// New builds a testbed of n nodes on cp with cloudConfig, and returns once every agent is
// ready. dir holds its files. On error, what was built is torn down.
func New(ctx context.Context, cp *controlplane.ControlPlane, n int, cloudConfig, dir string) (*Cluster, error) {
	return NewWithImages(ctx, cp, n, cloudConfig, dir, nil)
}

// NewWithImages is New with the agents, and the ccm once started, run from images when
// images is not nil.
func NewWithImages(ctx context.Context, cp *controlplane.ControlPlane, n int, cloudConfig, dir string, images *Images) (_ *Cluster, err error) {
	c := &Cluster{ControlPlane: cp, dir: dir, agents: map[string]*process.Process{}, kubeProxies: map[string]*kubeproxy.KubeProxy{}, images: images}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.Net, err = netns.Create(n); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.Net.Close)
	if c.Admin, err = kubernetes.NewForConfig(cp.AdminConfig()); err != nil {
		return nil, err
	}
	// Run last: with the ccm stopped, the Services it handled keep their finalizer, and
	// the next testbed's agents would still see them name node1.
	c.closers = append(c.closers, c.deleteServices)
	manifests, err := render.ManifestsDir()
	if err != nil {
		return nil, err
	}
	if err := install.Apply(ctx, cp.AdminConfig(), manifests); err != nil {
		return nil, fmt.Errorf("install the manifests: %w", err)
	}
	// The agents run with the agent ServiceAccount of the manifests, so a missing RBAC
	// rule fails; they reach the API server through a forwarder on the bridge.
	sa, err := cp.ServiceAccountConfig(ctx, "baremetal-system", "baremetal-agent")
	if err != nil {
		return nil, err
	}
	apiHost := strings.TrimPrefix(sa.Host, "https://")
	if c.api, err = c.Net.Forward(apiHost); err != nil {
		return nil, err
	}
	c.apiServerName, _, _ = net.SplitHostPort(apiHost)
	if c.agentKubeconfig, err = c.kubeconfig(sa, "agent"); err != nil {
		return nil, err
	}
	proxy, err := cp.KubeProxyConfig()
	if err != nil {
		return nil, err
	}
	if c.proxyKubeconfig, err = c.kubeconfig(proxy, "kube-proxy"); err != nil {
		return nil, err
	}
	// The EndpointSlices of the Services follow the pods of Serve, as in a cluster.
	if _, err := cp.ControllerManager(ctx); err != nil {
		return nil, fmt.Errorf("start the EndpointSlice controller: %w", err)
	}
	c.Config = filepath.Join(dir, "cloud-config.yaml")
	if err := os.WriteFile(c.Config, []byte(cloudConfig), 0o644); err != nil {
		return nil, err
	}
	if c.KeyFile, c.Key, err = WriteProbeKey(dir); err != nil {
		return nil, err
	}
	if c.VerdictKeyFile, c.VerdictPublicKeyFile, c.Signer, err = WriteVerdictKeys(dir); err != nil {
		return nil, err
	}
	if c.agentBinary, err = install.Binary(dir, "baremetal-agent"); err != nil {
		return nil, err
	}
	for _, h := range c.Net.Nodes {
		if err := c.addNode(ctx, h); err != nil {
			return nil, err
		}
		if _, err := c.StartAgent(h); err != nil {
			return nil, err
		}
	}
	// Run first: pods go before their namespaces and Nodes do.
	c.closers = append(c.closers, c.deletePods)
	for _, h := range c.Net.Nodes {
		if err := c.WaitAgentReady(ctx, h); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// addNode registers h as a Node, with its IPv4 address first, the InternalIP the ccm
// probes, and its IPv6 address, which kube-proxy takes for its node address of that
// family; and runs kube-proxy on it.
func (c *Cluster) addNode(ctx context.Context, h *netns.Host) error {
	node, err := c.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Label}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	c.closers = append(c.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The control plane may be gone already; a Node left in a stopped one is no leak.
		_ = c.Admin.CoreV1().Nodes().Delete(ctx, h.Label, metav1.DeleteOptions{})
		return nil
	})
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: h.IPv4.String()},
		{Type: corev1.NodeInternalIP, Address: h.IPv6.String()},
	}
	if _, err := c.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	kp, err := kubeproxy.Start(ctx, h, kubeproxy.Config{
		NodeName:     h.Label,
		Kubeconfig:   c.proxyKubeconfig,
		ClusterCIDRs: []netip.Prefix{c.Net.PodSubnet4, c.Net.PodSubnet6},
		Dir:          c.dir,
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.kubeProxies[h.Label] = kp
	c.mu.Unlock()
	c.closers = append(c.closers, kp.Stop)
	return nil
}

// KubeProxy returns the kube-proxy of a node.
func (c *Cluster) KubeProxy(node string) *kubeproxy.KubeProxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubeProxies[node]
}

// Serve puts a pod of app in namespace on each of nodes (every node when none is given;
// a node named twice gets two), named app-<node>[-<n>], labelled AppLabel=app and serving on ServicePort: it answers each
// connection with its name, its node and the client address it saw. The pods are ready;
// Close deletes them.
func (c *Cluster) Serve(ctx context.Context, namespace, app string, nodes ...*netns.Host) ([]*pods.Pod, error) {
	if len(nodes) == 0 {
		nodes = c.Net.Nodes
	}
	var made []*pods.Pod
	seen := map[*netns.Host]int{}
	for _, h := range nodes {
		name := app + "-" + h.Label
		if seen[h]++; seen[h] > 1 {
			name += fmt.Sprintf("-%d", seen[h])
		}
		p, err := pods.Create(ctx, c.Admin, c.Net, h, pods.Spec{
			Namespace: namespace, Name: name,
			Labels: map[string]string{AppLabel: app}, Port: ServicePort,
		})
		if err != nil {
			return made, err
		}
		c.mu.Lock()
		c.pods = append(c.pods, p)
		c.mu.Unlock()
		made = append(made, p)
	}
	return made, nil
}

// Pods returns the pods of Serve that are not deleted.
func (c *Cluster) Pods() []*pods.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pods)
}

// ServiceFor returns a Service of type LoadBalancer, ready to create, that selects the
// pods of app: port ServicePort, externalTrafficPolicy Local (so that the pod that
// answers is on the announcer, and sees the client's own address), no node ports.
func ServiceFor(namespace, name, app string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyLocal,
			Selector:                      map[string]string{AppLabel: app},
			Ports:                         []corev1.ServicePort{{Port: ServicePort, TargetPort: intstr.FromInt32(ServicePort)}},
		},
	}
}

// deletePods deletes the pods of Serve. Only a pod namespace left behind is an error: a
// control plane stopped by a test keeps its Pod objects, which go with it.
func (c *Cluster) deletePods() error {
	c.mu.Lock()
	made := c.pods
	c.pods = nil
	c.mu.Unlock()
	var errs []error
	for _, p := range made {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := p.Delete(ctx); err != nil {
			if _, statErr := os.Stat(p.Host.Path()); statErr == nil {
				errs = append(errs, err)
			}
		}
		cancel()
	}
	return errors.Join(errs...)
}

// kubeconfig writes a kubeconfig for cfg that reaches the API server through the bridge.
func (c *Cluster) kubeconfig(cfg *rest.Config, name string) (string, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + c.api.String()
	cfg.ServerName = c.apiServerName
	path := filepath.Join(c.dir, name+".kubeconfig")
	return path, install.WriteKubeconfig(cfg, path)
}

// API returns where the agents and the ccm reach the API server: a forwarder on the
// bridge.
func (c *Cluster) API() netip.AddrPort { return c.api }

// StartAgent runs the agent on node h; Close stops it.
func (c *Cluster) StartAgent(h *netns.Host) (*process.Process, error) {
	return c.StartAgentWith(h, c.Config)
}

// StartAgentWith runs the agent on node h with the cloud-config file at config instead
// of the testbed's, for a node that is to behave otherwise than the rest; Close stops it.
func (c *Cluster) StartAgentWith(h *netns.Host, config string) (*process.Process, error) {
	return c.startAgent(h, config)
}

// StartAgentArgs runs the agent on node h with more flags after the testbed's, which
// they override (the last of a flag wins); Close stops it. With --metrics-address
// overridden, AgentGet and WaitAgentReady do not reach the agent.
func (c *Cluster) StartAgentArgs(h *netns.Host, extra ...string) (*process.Process, error) {
	return c.startAgent(h, c.Config, extra...)
}

func (c *Cluster) startAgent(h *netns.Host, config string, extra ...string) (*process.Process, error) {
	args := append([]string{"--node-name=" + h.Label, "--kubeconfig=" + c.agentKubeconfig, "--cloud-config=" + config, "--probe-key-file=" + c.KeyFile,
		"--verdict-public-key-file=" + c.VerdictPublicKeyFile,
		"--metrics-address=" + agentMetrics, "--shutdown-grace-period=2s", "--cloud-config-reload-interval=200ms", "-v=2"}, extra...)
	p, err := c.start(h, h.Label+" agent", Agent, c.agentBinary, args, c.agentKubeconfig, config, c.KeyFile, c.VerdictPublicKeyFile)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.agents[h.Label] = p
	return p, nil
}

// Agent returns the agent process of a node, the last one started.
func (c *Cluster) Agent(node string) *process.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agents[node]
}

// StartCCM runs the real ccm, with the ccm ServiceAccount of the manifests, in the
// bridge's namespace: from there it reaches the API server through the forwarder and
// probes the agents at the nodes' addresses, as a ccm on a control-plane node would.
// Its status page is what Status reads. Close stops it.
func (c *Cluster) StartCCM(ctx context.Context, extraArgs ...string) (*process.Process, error) {
	return c.StartCCMOn(ctx, c.Net.Bridge, extraArgs...)
}

// StartCCMOn runs the real ccm in h's namespace, as a replica scheduled on that node:
// it dies with the node. Status reads the status page of whichever ccm started so far
// leads. Later arguments win over the testbed's leader-election settings.
func (c *Cluster) StartCCMOn(ctx context.Context, h *netns.Host, extraArgs ...string) (*process.Process, error) {
	sa, err := c.ControlPlane.ServiceAccountConfig(ctx, "baremetal-system", "baremetal-ccm")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := c.kubeconfig(sa, "ccm")
	if err != nil {
		return nil, err
	}
	bin, err := install.Binary(c.dir, "baremetal-ccm")
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--cloud-provider=baremetal",
		"--cloud-config=" + c.Config,
		"--probe-key-file=" + c.KeyFile,
		"--verdict-key-file=" + c.VerdictKeyFile,
		"--leader-elect=true",
		"--leader-elect-resource-namespace=baremetal-system",
		"--leader-elect-lease-duration=3s",
		"--leader-elect-renew-deadline=2s",
		"--leader-elect-retry-period=250ms",
		"--secure-port=0",
		"--status-address=" + statusAddress, // what Status reads
		"--v=2",
	}, extraArgs...)
	name := "baremetal-ccm"
	if h != c.Net.Bridge {
		name = h.Label + " ccm"
	}
	p, err := c.start(h, name, CCM, bin, args, kubeconfig, c.Config, c.KeyFile, c.VerdictKeyFile)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.statusHosts, h) {
		c.statusHosts = append(c.statusHosts, h)
	}
	return p, nil
}

// Node returns the host of the node called name, or nil.
func (c *Cluster) Node(name string) *netns.Host {
	for _, h := range c.Net.Nodes {
		if h.Label == name {
			return h
		}
	}
	return nil
}

// AgentGet fetches path (such as /metrics or /readyz) from node h's agent.
func (c *Cluster) AgentGet(ctx context.Context, h *netns.Host, path string) (int, string, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: h.Dial, DisableKeepAlives: true}}
	return install.Get(ctx, client, "http://"+agentMetrics+path)
}

// WaitAgentReady waits up to 30 s for node h's agent to report ready.
func (c *Cluster) WaitAgentReady(ctx context.Context, h *netns.Host) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if code, _, err := c.AgentGet(ctx, h, "/readyz"); err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			tail := ""
			if p := c.Agent(h.Label); p != nil {
				tail = p.Tail(20)
			}
			return fmt.Errorf("agent of %s not ready after 30 s:\n%s", h.Label, tail)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops every process the testbed started, removes its Nodes, and removes the
// network. It returns the errors of what could not be undone.
func (c *Cluster) Close() error {
	c.mu.Lock()
	procs := c.processes
	c.processes = nil
	closers := c.closers
	c.closers = nil
	c.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if err := p.Stop(5 * time.Second); err != nil && !strings.Contains(err.Error(), "exited") {
			errs = append(errs, err)
		}
	}
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteServices deletes every LoadBalancer Service, finalizers and all, so that a
// testbed built on the same control plane later starts from none. A control plane that
// is gone has none to delete.
func (c *Cluster) deleteServices() error {
	listCtx, cancelList := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelList()
	list, err := c.Admin.CoreV1().Services("").List(listCtx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var lbs []*corev1.Service
	for i := range list.Items {
		if list.Items[i].Spec.Type == corev1.ServiceTypeLoadBalancer {
			lbs = append(lbs, &list.Items[i])
		}
	}
	// Two requests per Service, from a few workers: the thousands a benchmark leaves take
	// the API server of a busy machine minutes one at a time.
	const workers = 8
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second+time.Duration(len(lbs))*50*time.Millisecond)
	defer cancel()
	todo := make(chan *corev1.Service)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for svc := range todo {
				if errs[w] == nil {
					errs[w] = c.deleteService(ctx, svc)
				}
			}
		})
	}
	for _, svc := range lbs {
		todo <- svc
	}
	close(todo)
	wg.Wait()
	return errors.Join(errs...)
}

// deleteService deletes svc, removing its finalizers first.
func (c *Cluster) deleteService(ctx context.Context, svc *corev1.Service) error {
	if len(svc.Finalizers) > 0 {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := c.Admin.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove the finalizers of Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	if err := c.Admin.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// Processes returns every process the testbed started, for logs.
func (c *Cluster) Processes() []*process.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*process.Process(nil), c.processes...)
}

// WriteProbeKey writes a new random probe key, as an install makes one, to a file in dir,
// and returns its path and the key.
func WriteProbeKey(dir string) (string, *probe.Key, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, err
	}
	data := []byte(base64.StdEncoding.EncodeToString(raw) + "\n")
	key, err := probe.ParseKey(data)
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, "probe-key")
	return path, key, os.WriteFile(path, data, 0o600)
}

// WriteVerdictKeys writes a new Ed25519 key pair to files in dir, in the PEM forms openssl
// writes them (docs/install.md, Install), and returns the paths of the private and the public key,
// and the private key.
func WriteVerdictKeys(dir string) (private, public string, signer *probe.Signer, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", "", nil, err
	}
	private, public = filepath.Join(dir, "verdict.key"), filepath.Join(dir, "verdict.pub")
	if err := os.WriteFile(private, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(public, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return "", "", nil, err
	}
	return private, public, probe.NewSigner(priv), nil
}
