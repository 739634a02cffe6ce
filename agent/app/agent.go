// Package app is the agent's composition root: New builds every part of a node's agent
// from its Config, in the order each needs the others, and Run runs them until the agent
// is stopped or drained. The command only parses flags into a Config.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/conntrack"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/peers"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/realtime"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/speaker"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/verdict"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/wirecheck"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Config is what an agent is made from: its flags, as the command parsed them. The
// errors of New name the flags.
type Config struct {
	// NodeName is this node's name, as in its Node object.
	NodeName string
	// Kubeconfig is the path of a kubeconfig; in-cluster configuration when empty.
	Kubeconfig string
	// CloudConfig is the path of the cloud-config the ccm uses.
	CloudConfig string
	// ProbeAddress and MetricsAddress are where to listen; the Node's first InternalIP
	// when empty.
	ProbeAddress, MetricsAddress string
	// ProbeKeyFile is the file of the probe key, and VerdictPublicKeyFile that of the
	// ccm's public keys.
	ProbeKeyFile, VerdictPublicKeyFile string
	// ShutdownGrace is how long a draining agent keeps answering while Services name it.
	ShutdownGrace time.Duration
	// ConfigReload is how often the cloud-config file is checked for changes.
	ConfigReload time.Duration
	// RealtimePriority is the SCHED_FIFO priority once ready; 0 for none.
	RealtimePriority int
	// SweepConntrack clears the untranslated connection-tracking entries of gained
	// addresses.
	SweepConntrack bool
}

// Agent is one node's agent: it answers the probes, follows the Services naming its
// node, and answers ARP and NDP for what it announces.
type Agent struct {
	cfg         Config
	cloud       *config.Config
	client      kubernetes.Interface
	broadcaster record.EventBroadcaster
	services    informers.SharedInformerFactory
	nodes       informers.SharedInformerFactory
	responder   *responder.Responder
	verdict     *verdict.Keeper
	speaker     *speaker.Speaker
	watcher     *servicewatch.Watcher
	sweeper     *conntrack.Sweeper // nil when not sweeping
	wirecheck   *wirecheck.Check
	health      *health
	probeConn   net.PacketConn
	metrics     net.Listener
	listenAt    netip.Addr   // invalid when both addresses were given
	moved       <-chan error // the Node's address changed; nil when not followed
}

// New makes an agent of cfg: it reads the files, finds the Node, opens the sockets and
// builds every part, each given what it needs as it is built. Nothing runs before Run;
// Close releases what New opened if Run is not called.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("--node-name is empty and $NODE_NAME is not set: the agent must know its node")
	}
	if cfg.RealtimePriority < 0 || cfg.RealtimePriority > realtime.MaxPriority {
		return nil, fmt.Errorf("--realtime-priority %d: want 0 (off) to %d", cfg.RealtimePriority, realtime.MaxPriority)
	}
	if cfg.CloudConfig == "" {
		return nil, errors.New("--cloud-config is required: the pools bound what this node may announce")
	}
	cloud, err := config.Load(cfg.CloudConfig)
	if err != nil {
		return nil, err
	}
	if cfg.ProbeKeyFile == "" {
		return nil, errors.New("--probe-key-file is required: the agent answers only probes authenticated with the key it shares with the ccm")
	}
	key, err := probe.LoadKey(cfg.ProbeKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--probe-key-file: %w", err)
	}
	if cfg.VerdictPublicKeyFile == "" {
		return nil, errors.New("--verdict-public-key-file is required: the agent takes verdicts and duty lists only when the ccm signed them")
	}
	ccmKey, err := probe.LoadVerifier(cfg.VerdictPublicKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--verdict-public-key-file: %w", err)
	}
	restConfig, err := clientConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	restConfig.UserAgent = "baremetal-agent/" + version.Get().GitVersion
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, cloud: cloud, client: client}
	if err := a.listen(ctx); err != nil {
		return nil, err
	}
	if err := a.build(ctx, key, ccmKey); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// listen opens the probe socket and the metrics listener where the flags, or else the
// Node, say.
func (a *Agent) listen(ctx context.Context) error {
	// Where to listen is in the Node, unless both flags say it: then the agent can start
	// while the API server is away, as before them.
	var node *v1.Node
	var err error
	if a.cfg.ProbeAddress == "" || a.cfg.MetricsAddress == "" {
		if node, err = getNode(ctx, a.client, a.cfg.NodeName); err != nil {
			return err
		}
	} else if err := checkNode(ctx, a.client, a.cfg.NodeName); err != nil {
		return err
	}
	probeAddress, metricsAddress, listenAt, err := listenAddresses(a.cfg.ProbeAddress, a.cfg.MetricsAddress, node, a.cloud.Failover.AgentPort)
	if err != nil {
		return err
	}
	a.listenAt = listenAt
	if a.probeConn, err = net.ListenPacket("udp", probeAddress); err != nil {
		return fmt.Errorf("--probe-address %q: %w", probeAddress, err)
	}
	if a.metrics, err = net.Listen("tcp", metricsAddress); err != nil {
		a.probeConn.Close()
		return fmt.Errorf("--metrics-address %q: %w", metricsAddress, err)
	}
	return nil
}

// build makes the parts, each from the ones it needs.
func (a *Agent) build(ctx context.Context, key *probe.Key, ccmKey *probe.Verifier) error {
	// Every Service of the cluster, each kept only as far as the agent reads it.
	a.services = informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTransform(servicewatch.Transform))
	services := servicewatch.NewCache(a.services)
	var err error
	a.responder, err = responder.New(a.cfg.NodeName, key, ccmKey, a.cloud.Failover.ProbeInterval, services.Version)
	if err != nil {
		return fmt.Errorf("--node-name: %w", err)
	}
	// Not ready before the Service cache synced and the links were read: the ccm keeps
	// addresses away from it meanwhile, and its standbys announce what it would.
	a.responder.SetState(probe.Starting)

	a.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	a.broadcaster.StartStructuredLogging(2)
	a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	recorder := a.broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "baremetal-agent", Host: a.cfg.NodeName})

	// Every node, to probe the peers this one backs up while no ccm is heard, at the
	// addresses known before the API server went away; of the others only what that needs
	// is kept. This node's labels decide which pools' addresses it may announce.
	a.nodes = informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTransform(peerNode(a.cfg.NodeName)))
	nodes := a.nodes.Core().V1().Nodes()
	checks := peers.New(a.cloud.Failover, key, nodes)
	// A Node whose address changes is probed at the new one: the agent must follow it.
	if a.listenAt.IsValid() {
		if a.moved, err = addressMoved(nodes.Informer(), a.cfg.NodeName, a.listenAt); err != nil {
			return err
		}
	}
	a.verdict = verdict.New(a.cfg.NodeName, a.cloud.Failover, a.responder, checks)
	opts := speaker.Options{
		// The watcher, built next from the speaker, records the events.
		Unplaced: a.unplaced,
		// Perhaps cut off: once back, first learn what others took over meanwhile.
		LinkLost: func(string) { a.verdict.Unconfirm() },
		Unable:   a.responder.SetUnable,
		Conflict: a.duplicateAddress,
	}
	if a.cfg.SweepConntrack {
		a.sweeper = conntrack.NewSweeper(conntrack.Kernel{})
		opts.Gained = a.sweeper.Gained
	}
	a.speaker = speaker.New(opts)
	a.speaker.SetPools(a.cloud.Pools)
	a.speaker.SetRefresh(a.cloud.Announcements.RefreshInterval)
	a.watcher, err = servicewatch.New(a.cfg.NodeName, a.cloud, services, nodes, a.speaker, a.verdict, a.responder, recorder)
	if err != nil {
		return err
	}
	a.health = &health{watch: a.watcher}
	a.wirecheck = wirecheck.New(a.cfg.NodeName, wirecheck.Options{Dark: a.watcher.AddressUnanswered, Lit: a.watcher.AddressAnswered})
	a.wirecheck.SetRanges(config.RangesOf(a.cloud.Pools))
	a.wirecheck.SetInterval(a.cloud.Announcements.CheckInterval)
	a.watcher.SetBacker(&backer{speaker: a.speaker, nodes: nodes.Lister(), check: a.wirecheck})

	legacyregistry.CustomMustRegister(speaker.NewCollector(a.speaker), responder.NewCollector(a.responder), wirecheck.NewCollector(a.wirecheck))
	legacyregistry.MustRegister(servicewatch.Metrics()...)
	legacyregistry.MustRegister(verdict.Metrics()...)
	legacyregistry.MustRegister(config.Metrics()...)
	legacyregistry.MustRegister(realtime.Metrics()...)
	legacyregistry.MustRegister(conntrack.Metrics()...)
	return nil
}

// duplicateAddress has the watcher record the events of an address another host claims.
func (a *Agent) duplicateAddress(c speaker.Conflict) {
	a.watcher.DuplicateAddress(c.Address, c.Claim, c.Interface, c.MAC)
}

// unplaced has the watcher record the events of an address the speaker has no interface
// for. The speaker is built before the watcher, which applies to it.
func (a *Agent) unplaced(addr desired.Address) { a.watcher.Unplaced(addr) }

// Close releases the sockets New opened, for an agent that is not run.
func (a *Agent) Close() {
	if a.broadcaster != nil {
		a.broadcaster.Shutdown()
	}
	a.probeConn.Close()
	a.metrics.Close()
}

// Run runs the agent until ctx ends, the speaker fails, the Node's address changes, or
// a signal arrives: then it drains, still answering, until no Service names the node, the
// grace period ends, or a second signal arrives.
func (a *Agent) Run(ctx context.Context, signals <-chan os.Signal) error {
	defer a.Close()
	// The speaker outlives the signal: on SIGTERM the agent drains, answering as before.
	runCtx, stopRunning := context.WithCancel(context.Background())
	defer stopRunning()
	go serveHTTP(a.metrics, a.watcher, a.health)
	go func() {
		err := a.responder.Serve(a.probeConn)
		if err == nil {
			err = errors.New("its socket was closed")
		}
		klog.ErrorS(err, "Health responder stopped")
		a.health.probeStopped(time.Now(), err)
	}()
	// A pool removed from the file stops being announced without a restart, and a new
	// refresh interval takes effect at once.
	go config.Watch(runCtx, a.cfg.CloudConfig, a.cfg.ConfigReload, a.cloud, func(cfg *config.Config) {
		a.watcher.SetConfig(cfg)
		a.speaker.SetPools(cfg.Pools)
		a.speaker.SetRefresh(cfg.Announcements.RefreshInterval)
		a.wirecheck.SetRanges(config.RangesOf(cfg.Pools))
		a.wirecheck.SetInterval(cfg.Announcements.CheckInterval)
	})
	speakerDone := make(chan error, 1)
	go func() { speakerDone <- a.speaker.Run(runCtx) }()
	a.services.Start(runCtx.Done())
	a.nodes.Start(runCtx.Done())
	go a.watcher.Run(runCtx)
	go a.verdict.Run(runCtx)
	go a.wirecheck.Run(runCtx)
	if a.sweeper != nil {
		go a.sweeper.Run(runCtx)
	}
	go func() {
		// Not while the caches fill: listing thousands of Services is no work to do
		// ahead of the node's pods.
		if becomeReady(runCtx, a.responder, a.watcher, a.speaker) {
			realtime.NewKeeper(a.cfg.RealtimePriority).Run(runCtx)
		}
	}()
	klog.InfoS("Agent started", "node", a.cfg.NodeName, "version", version.Get().GitVersion, "probeAddress", a.probeConn.LocalAddr(), "metricsAddress", a.metrics.Addr())

	select {
	case err := <-speakerDone:
		return fmt.Errorf("speaker stopped: %w", err)
	case err := <-a.moved:
		klog.ErrorS(err, "The Node's address changed", "node", a.cfg.NodeName, "listeningAt", a.listenAt)
		return err
	case <-ctx.Done():
	case s := <-signals:
		klog.InfoS("Draining: still answering while Services name this node", "signal", s, "node", a.cfg.NodeName, "services", a.watcher.Named(), "gracePeriod", a.cfg.ShutdownGrace)
		a.responder.SetState(probe.Draining)
		a.speaker.Drain()
		drain(a.watcher, a.cfg.ShutdownGrace, signals)
	}
	stopRunning()
	if err := <-speakerDone; err != nil {
		klog.ErrorS(err, "The speaker stopped with an error", "node", a.cfg.NodeName)
	}
	klog.InfoS("Agent stopped", "node", a.cfg.NodeName)
	return nil
}
