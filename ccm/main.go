// Command baremetal-ccm is the cloud-controller-manager of cloud-provider-baremetal: the
// upstream service controller, with the "baremetal" provider handing out addresses from
// the pools of --cloud-config, and beside it the controllers that pick the node announcing
// each address and keep the Services' status true.
package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/lbstatus"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/provider"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/statuspage"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// flagValues are the flags of baremetal-ccm beyond the cloud-controller-manager's.
type flagValues struct {
	statusAddress string
	probeKey      string
	verdictKey    string
	configReload  time.Duration
}

// channelKeys are the keys of the failover channel: the probe key the ccm shares with the
// agents, and the private key only the ccm holds, which signs its verdicts and duty lists.
type channelKeys struct {
	probe  *probe.Key
	signer *probe.Signer
}

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "baremetal-ccm: %v\n", err)
		os.Exit(1)
	}
	opts.KubeCloudShared.CloudProvider.Name = provider.Name
	// A lock of our own, so this never takes turns with another cloud-controller-manager.
	opts.Generic.LeaderElection.ResourceName = "baremetal-ccm"
	// Allocation is in memory and cheap; what limits how fast Services get addresses is
	// the API: each new Service costs the service controller a finalizer patch, a status
	// patch and a few events. Upstream's defaults (1 worker, 20 QPS) take minutes for
	// thousands of Services.
	opts.ServiceController.ConcurrentServiceSyncs = 10
	opts.Generic.ClientConnection.QPS = 100
	opts.Generic.ClientConnection.Burst = 200

	// Loopback only by default: the page has no authentication. Operators reach it with
	// kubectl port-forward.
	o := flagValues{statusAddress: "127.0.0.1:7476", configReload: 10 * time.Second}
	var flags cliflag.NamedFlagSets
	fs := flags.FlagSet("baremetal")
	fs.StringVar(&o.statusAddress, "status-address", o.statusAddress,
		"host:port to serve the read-only status page on (/ as HTML, /status.json), without authentication; empty disables it. A standby answers 503.")
	fs.StringVar(&o.probeKey, "probe-key-file", "",
		"File holding the probe key, one key per line (the first signs, every one verifies), shared with the agents: from the Secret the install creates. Required.")
	fs.StringVar(&o.verdictKey, "verdict-key-file", "",
		"File holding the Ed25519 private key (PEM, as openssl genpkey -algorithm ed25519 writes it) that signs the verdicts and duty lists; only the ccm holds it, the agents hold its public key. Required.")
	fs.DurationVar(&o.configReload, "cloud-config-reload-interval", o.configReload,
		"How often the leader checks the cloud-config file for changes; a valid new file takes effect at once, an invalid one is logged and the last good one kept.")

	var cloud *provider.Cloud
	var keys channelKeys
	page := statuspage.New()
	cmd := app.NewCloudControllerManagerCommand(opts,
		func(*cloudconfig.CompletedConfig) cloudprovider.Interface {
			// Here rather than in PreRunE: logging is configured by now. Every replica
			// serves, before leader election; a standby answers 503.
			if o.statusAddress != "" {
				if err := page.Serve(o.statusAddress); err != nil {
					klog.ErrorS(err, "Cannot serve the status page; set --status-address to another address, or to \"\" to disable it")
					klog.FlushAndExit(klog.ExitFlushTimeout, 1)
				}
			}
			return cloud
		},
		controllers(page, func() channelKeys { return keys }, func() time.Duration { return o.configReload }), names.CCMControllerAliases(), flags, wait.NeverStop)
	cmd.Use = "baremetal-ccm"
	cmd.Long = `baremetal-ccm gives Services of type LoadBalancer addresses from the pools of its
cloud-config, and picks the node that announces each address.`
	// The cloud-config is read before anything else starts, so that a bad one stops the
	// process with every problem listed, before it serves or touches the API.
	cmd.PreRunE = func(*cobra.Command, []string) error {
		verflag.PrintAndExitIfRequested()
		if cloud, err = newCloud(opts.KubeCloudShared.CloudProvider.Name, opts.KubeCloudShared.CloudProvider.CloudConfigFile); err != nil {
			return err
		}
		if o.probeKey == "" {
			return errors.New("--probe-key-file is required: the agents answer only probes authenticated with the key they share with the ccm")
		}
		if keys.probe, err = probe.LoadKey(o.probeKey); err != nil {
			return fmt.Errorf("--probe-key-file: %w", err)
		}
		if o.verdictKey == "" {
			return errors.New("--verdict-key-file is required: the agents take only verdicts and duty lists signed with the private key whose public key they hold")
		}
		if keys.signer, err = probe.LoadSigner(o.verdictKey); err != nil {
			return fmt.Errorf("--verdict-key-file: %w", err)
		}
		return nil
	}
	os.Exit(cli.Run(cmd))
}

func newCloud(name, configFile string) (*provider.Cloud, error) {
	if name != provider.Name {
		return nil, fmt.Errorf("--cloud-provider=%q: this binary only serves %q", name, provider.Name)
	}
	if configFile == "" {
		return nil, errors.New("--cloud-config is required: the pools of addresses come from it")
	}
	cfg, err := config.Load(configFile)
	if err != nil {
		return nil, err
	}
	return provider.New(cfg), nil
}

// controllers returns the controllers of the ccm, each with the client name it is known
// by in the API server's logs and metrics. They run on the leader only. Nodes and routes
// are not a bare-metal provider's business.
func controllers(page *statuspage.Page, keys func() channelKeys, reloadInterval func() time.Duration) map[string]app.ControllerInitFuncConstructor {
	return map[string]app.ControllerInitFuncConstructor{
		names.ServiceLBController: {
			InitContext: app.ControllerInitContext{ClientName: "baremetal-service-controller"},
			Constructor: startServiceController,
		},
		announcer.Name: {
			InitContext: app.ControllerInitContext{ClientName: announcer.Name},
			Constructor: startAnnouncer(page, keys),
		},
		lbstatus.Name: {
			InitContext: app.ControllerInitContext{ClientName: lbstatus.Name},
			Constructor: startLBStatus,
		},
		configReloader: {
			InitContext: app.ControllerInitContext{ClientName: configReloader},
			Constructor: startConfigReloader(reloadInterval),
		},
	}
}
