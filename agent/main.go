// Command baremetal-agent makes its node answer ARP and NDP for the Service addresses the
// ccm has given it (the lb.baremetal.io/announcer annotation), and answers the ccm's
// health probes.
package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/component-base/version/verflag"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/app"
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
			a, err := app.New(cmd.Context(), o.config())
			if err != nil {
				return err
			}
			signals := make(chan os.Signal, 1)
			signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
			return a.Run(cmd.Context(), signals)
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

// config returns the agent's Config of the flags.
func (o options) config() app.Config {
	return app.Config{
		NodeName: o.nodeName, Kubeconfig: o.kubeconfig, CloudConfig: o.cloudConfig,
		ProbeAddress: o.probeAddress, MetricsAddress: o.metricsAddress,
		ProbeKeyFile: o.probeKey, VerdictPublicKeyFile: o.verdictPublicKey,
		ShutdownGrace: o.shutdownGrace, ConfigReload: o.configReload,
		RealtimePriority: o.realtimePriority, SweepConntrack: o.sweepConntrack,
	}
}
