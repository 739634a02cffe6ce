// Command baremetal-agent makes its node answer ARP and NDP for the Service addresses the
// ccm has given it (the lb.baremetal.io/announcer annotation), and answers the ccm's
// health probes.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/cli"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/conntrack"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/realtime"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/speaker"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/standby"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/prober"
)

type options struct {
	nodeName     string
	kubeconfig   string
	cloudConfig  string
	probeAddress string
	probeKey     string
	// verdictPublicKey is the file of the ccm's public keys.
	verdictPublicKey string
	metricsAddress   string
	shutdownGrace    time.Duration
	configReload     time.Duration
	realtimePriority int
	sweepConntrack   bool
	logs             *logsapi.LoggingConfiguration
}

func main() {
	o := options{nodeName: os.Getenv("NODE_NAME"), shutdownGrace: 30 * time.Second, configReload: 10 * time.Second, sweepConntrack: true, logs: logsapi.NewLoggingConfiguration()}
	cmd := &cobra.Command{
		Use:   "baremetal-agent",
		Short: "Answer ARP and NDP for the Service addresses this node announces",
		Long: `baremetal-agent runs on every node (a DaemonSet with host networking, CAP_NET_RAW and
CAP_NET_ADMIN).
It answers ARP (IPv4) and NDP (IPv6) for the addresses of the Services whose
lb.baremetal.io/announcer annotation names its node, announces them when it gains them
and then once per announcements.refreshInterval of the cloud-config, and answers the
ccm's health probes.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := logsapi.ValidateAndApply(o.logs, nil); err != nil {
				return err
			}
			return run(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.nodeName, "node-name", o.nodeName, "This node's name, as in its Node object. Defaults to $NODE_NAME (set it from spec.nodeName with the downward API).")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster configuration when empty.")
	fs.StringVar(&o.cloudConfig, "cloud-config", "", "Path to the cloud-config the ccm uses: its pools bound what this node may announce.")
	fs.StringVar(&o.probeKey, "probe-key-file", "", "File holding the probe key, one key per line (the first signs, every one verifies), shared with the ccm: from the Secret the install creates.")
	fs.StringVar(&o.verdictPublicKey, "verdict-public-key-file", "", "File holding the ccm's Ed25519 public keys (PEM blocks \"PUBLIC KEY\", any of them verifies): the agent takes only verdicts and duty lists signed by the ccm. From the probe key Secret (verdict.pub).")
	fs.StringVar(&o.probeAddress, "probe-address", "", `UDP address of the health responder the ccm and the peers probe; when empty, the Node's first InternalIP (where they probe it) at failover.agentPort of the cloud-config. ":<port>" listens on every address of the node.`)
	fs.StringVar(&o.metricsAddress, "metrics-address", "", `HTTP address serving /metrics, /healthz, /livez and /readyz; when empty, the Node's first InternalIP (the pod's IP on the host network, which the kubelet's probes and Prometheus use) at port 7475. ":<port>" listens on every address of the node.`)
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace-period", o.shutdownGrace, "On SIGTERM, how long to keep answering, as draining, while Services still name this node.")
	fs.DurationVar(&o.configReload, "cloud-config-reload-interval", o.configReload, "How often to check the cloud-config file for changes (a ConfigMap update reaches the file within a minute or so); a valid new file takes effect at once, an invalid one is logged and ignored.")
	fs.IntVar(&o.realtimePriority, "realtime-priority", o.realtimePriority, "Experimental, off by default: the SCHED_FIFO priority (1-99) the agent runs at once ready, above every process of the fair scheduler, so that busy pods cannot delay its answers to probes, ARP and NDP; it gives the priority back for a while whenever it uses over half a core for a second. Needs CAP_SYS_NICE. Known hazard: agents at this priority have been seen to spin a thread at a whole core for minutes, starving the node, with the give-back unable to run; do not use it in production yet.")
	fs.BoolVar(&o.sweepConntrack, "sweep-conntrack", o.sweepConntrack, "For a minute after this node begins to announce an address, clear the TCP connection-tracking entries its kernel made for the address untranslated: SYNs that came before kube-proxy had the address's rules, whose entries would keep the retries of those connections failing for minutes. Needs CAP_NET_ADMIN; without it the agent logs an error once and goes on without.")
	verflag.AddFlags(fs)
	logsapi.AddFlags(o.logs, fs)
	os.Exit(cli.Run(cmd))
}

func run(ctx context.Context, o options) error {
	if o.nodeName == "" {
		return errors.New("--node-name is empty and $NODE_NAME is not set: the agent must know its node")
	}
	if o.realtimePriority < 0 || o.realtimePriority > realtime.MaxPriority {
		return fmt.Errorf("--realtime-priority %d: want 0 (off) to %d", o.realtimePriority, realtime.MaxPriority)
	}
	if o.cloudConfig == "" {
		return errors.New("--cloud-config is required: the pools bound what this node may announce")
	}
	cfg, err := config.Load(o.cloudConfig)
	if err != nil {
		return err
	}
	if o.probeKey == "" {
		return errors.New("--probe-key-file is required: the agent answers only probes authenticated with the key it shares with the ccm")
	}
	key, err := probe.LoadKey(o.probeKey)
	if err != nil {
		return fmt.Errorf("--probe-key-file: %w", err)
	}
	if o.verdictPublicKey == "" {
		return errors.New("--verdict-public-key-file is required: the agent takes verdicts and duty lists only when the ccm signed them")
	}
	ccmKey, err := probe.LoadVerifier(o.verdictPublicKey)
	if err != nil {
		return fmt.Errorf("--verdict-public-key-file: %w", err)
	}
	restConfig, err := clientConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	restConfig.UserAgent = "baremetal-agent/" + version.Get().GitVersion
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	// Where to listen is in the Node, unless both flags say it: then the agent can start
	// while the API server is away, as before them.
	var node *v1.Node
	if o.probeAddress == "" || o.metricsAddress == "" {
		if node, err = getNode(ctx, client, o.nodeName); err != nil {
			return err
		}
	} else if err := checkNode(ctx, client, o.nodeName); err != nil {
		return err
	}
	probeAddress, metricsAddress, listenAt, err := listenAddresses(o.probeAddress, o.metricsAddress, node, cfg.Failover.AgentPort)
	if err != nil {
		return err
	}
	rs, err := responder.New(o.nodeName, key, ccmKey, cfg.Failover.ProbeInterval)
	if err != nil {
		return fmt.Errorf("--node-name: %w", err)
	}
	// Not ready before the Service cache synced and the links were read: the ccm keeps
	// addresses away from it meanwhile, and its standbys announce what it would.
	rs.SetState(probe.Starting)
	probeConn, err := net.ListenPacket("udp", probeAddress)
	if err != nil {
		return fmt.Errorf("--probe-address %q: %w", probeAddress, err)
	}
	defer probeConn.Close()
	metricsListener, err := net.Listen("tcp", metricsAddress)
	if err != nil {
		return fmt.Errorf("--metrics-address %q: %w", metricsAddress, err)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(2)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "baremetal-agent", Host: o.nodeName})

	// Every Service of the cluster, each kept only as far as the agent reads it.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(servicewatch.Transform))
	// Every node, to probe the peers this one backs up while no ccm is heard, at the
	// addresses known before the API server went away; of the others only what that needs
	// is kept. This node's labels decide which pools' addresses it may announce.
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(peerNode(o.nodeName)))
	nodes := nodeFactory.Core().V1().Nodes()
	peers := prober.New(cfg.Failover, key, nil, nodes, probe.FromAgent)
	// A Node whose address changes is probed at the new one: the agent must follow it.
	var moved <-chan error
	if listenAt.IsValid() {
		if moved, err = addressMoved(nodes.Informer(), o.nodeName, listenAt); err != nil {
			return err
		}
	}
	standbys := standby.New(o.nodeName, cfg.Failover, rs, peers)
	var watcher *servicewatch.Watcher
	spOpts := speaker.Options{
		Unplaced: func(a desired.Address) { watcher.Unplaced(a) },
		// Perhaps cut off: once back, first learn what others took over meanwhile.
		LinkLost: func(string) { standbys.Unconfirm() },
		Unable:   rs.SetUnable,
	}
	var sweeper *conntrack.Sweeper
	if o.sweepConntrack {
		sweeper = conntrack.NewSweeper(conntrack.Kernel{})
		spOpts.Gained = sweeper.Gained
	}
	sp := speaker.New(spOpts)
	sp.SetPools(cfg.Pools)
	sp.SetRefresh(cfg.Announcements.RefreshInterval)
	watcher, err = servicewatch.New(o.nodeName, cfg, factory, nodes, sp, standbys, recorder)
	if err != nil {
		return err
	}
	rs.SetCacheVersion(watcher.CacheVersion)
	standbys.SetCacheVersion(watcher.CacheVersion)
	watcher.SetDuties(rs)
	legacyregistry.CustomMustRegister(speaker.NewCollector(sp), responder.NewCollector(rs))
	legacyregistry.MustRegister(servicewatch.Metrics()...)
	legacyregistry.MustRegister(standby.Metrics()...)
	legacyregistry.MustRegister(config.Metrics()...)
	legacyregistry.MustRegister(realtime.Metrics()...)
	legacyregistry.MustRegister(conntrack.Metrics()...)

	// The speaker outlives the signal: on SIGTERM the agent drains, answering as before.
	runCtx, stopRunning := context.WithCancel(context.Background())
	defer stopRunning()
	h := &health{watch: watcher}
	go serveHTTP(metricsListener, watcher, h)
	go func() {
		err := rs.Serve(probeConn)
		if err == nil {
			err = errors.New("its socket was closed")
		}
		klog.ErrorS(err, "Health responder stopped")
		h.probeStopped(time.Now(), err)
	}()
	// A pool removed from the file stops being announced without a restart, and a new
	// refresh interval takes effect at once.
	go config.Watch(runCtx, o.cloudConfig, o.configReload, cfg, func(cfg *config.Config) {
		watcher.SetConfig(cfg)
		sp.SetPools(cfg.Pools)
		sp.SetRefresh(cfg.Announcements.RefreshInterval)
	})
	speakerDone := make(chan error, 1)
	go func() { speakerDone <- sp.Run(runCtx) }()
	factory.Start(runCtx.Done())
	nodeFactory.Start(runCtx.Done())
	go watcher.Run(runCtx)
	go standbys.Run(runCtx)
	if sweeper != nil {
		go sweeper.Run(runCtx)
	}
	go func() {
		// Not while the caches fill: listing thousands of Services is no work to do
		// ahead of the node's pods.
		if becomeReady(runCtx, rs, watcher, sp) {
			realtime.NewKeeper(o.realtimePriority).Run(runCtx)
		}
	}()
	klog.InfoS("Agent started", "node", o.nodeName, "version", version.Get().GitVersion, "probeAddress", probeConn.LocalAddr(), "metricsAddress", metricsListener.Addr())

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	select {
	case err := <-speakerDone:
		return fmt.Errorf("speaker stopped: %w", err)
	case err := <-moved:
		klog.ErrorS(err, "The Node's address changed", "node", o.nodeName, "listeningAt", listenAt)
		return err
	case <-ctx.Done():
	case s := <-signals:
		klog.InfoS("Draining: still answering while Services name this node", "signal", s, "node", o.nodeName, "services", watcher.Named(), "gracePeriod", o.shutdownGrace)
		rs.SetState(probe.Draining)
		sp.Drain()
		drain(watcher, o.shutdownGrace, signals)
	}
	stopRunning()
	if err := <-speakerDone; err != nil {
		klog.ErrorS(err, "The speaker stopped with an error", "node", o.nodeName)
	}
	klog.InfoS("Agent stopped", "node", o.nodeName)
	return nil
}

// becomeReady makes the responder's replies say ready once the Service cache has synced
// and the speaker has read the links, unless the agent drains by then. It returns
// whether the agent became ready.
func becomeReady(ctx context.Context, rs *responder.Responder, watcher *servicewatch.Watcher, sp *speaker.Speaker) bool {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return watcher.HasSynced() && sp.Ready(), nil
	})
	if ctx.Err() == nil && rs.SwapState(probe.Starting, probe.Ready) {
		klog.InfoS("Ready: the Service cache has synced and the links are read")
		return true
	}
	return false
}

// drain returns once no Service names this node, the grace period is over, or a second
// signal arrives.
func drain(watcher *servicewatch.Watcher, grace time.Duration, signals <-chan os.Signal) {
	watcher.Drain()
	deadline := time.After(grace)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for watcher.Named() > 0 {
		select {
		case <-deadline:
			klog.InfoS("Grace period over; stopping with Services still naming this node", "services", watcher.Named())
			return
		case <-signals:
			return
		case <-tick.C:
		}
	}
	// The addresses moved away, but the new announcers' agents may learn it a little
	// later than this one did: answer a moment longer, so that none goes unanswered.
	select {
	case <-deadline:
	case <-signals:
	case <-time.After(drainLinger):
	}
}

// drainLinger is how long a draining agent keeps answering after no Service names its
// node: several times what a watch event takes to reach every agent on a busy node.
const drainLinger = 500 * time.Millisecond

// peerNode keeps of another node only its name and addresses, which is all a check of
// peers needs, so that the cache of a large cluster's nodes stays small.
func peerNode(self string) cache.TransformFunc {
	return func(obj any) (any, error) {
		n, ok := obj.(*v1.Node)
		if !ok || n.Name == self {
			if ok {
				n.ManagedFields = nil
			}
			return obj, nil
		}
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
			Status:     v1.NodeStatus{Addresses: n.Status.Addresses},
		}, nil
	}
}

func clientConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// serveHTTP serves the metrics and the probes of the kubelet. /healthz reports everything
// that is dead; /livez, the liveness probe, only what a restart mends: an agent restarted
// while the API server is away could not fill its cache, and would announce nothing.
func serveHTTP(l net.Listener, watcher *servicewatch.Watcher, h *health) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	report := func(check func(time.Time) string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if problem := check(time.Now()); problem != "" {
				http.Error(w, problem, http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("/healthz", report(h.healthy))
	mux.HandleFunc("/livez", report(h.live))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !watcher.HasSynced() {
			http.Error(w, "Service cache not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Metrics server stopped")
	}
}
