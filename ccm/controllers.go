package main

import (
	"context"

	"time"

	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/component-base/metrics/legacyregistry"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/conditions"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/duty"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/lbstatus"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/provider"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/statuspage"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// announcerWorkers is how many address groups are decided at once. Decisions are cheap;
// the workers wait on their patches, so after a node failure this many patches are in
// flight.
const announcerWorkers = 16

// The announcer client's rate limit: enough for a node failure's burst of patches, one per
// Service the node announced, to go out without waiting behind --kube-api-qps. The API
// server's priority and fairness still bounds them.
const (
	announcerQPS   = 500
	announcerBurst = 1000
)

// configReloader names the controller that follows the cloud-config file.
const configReloader = "baremetal-cloud-config"

// lbStatusWorkers is how many Services' statuses are checked at once.
const lbStatusWorkers = 4

// conditionWorkers is how many Services' conditions are written at once.
const conditionWorkers = 4

// startAnnouncer runs the prober and the announcer on the ccm's shared caches, and shows
// them on the status page.
func startAnnouncer(page *statuspage.Page, keys func() channelKeys) app.InitFuncConstructor {
	return func(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
		return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
			c := cloud.(*provider.Cloud)
			restConfig := completed.ClientBuilder.ConfigOrDie(initContext.ClientName)
			restConfig.QPS, restConfig.Burst = max(restConfig.QPS, announcerQPS), max(restConfig.Burst, announcerBurst)
			client, err := kubernetes.NewForConfig(restConfig)
			if err != nil {
				return nil, false, err
			}
			factory := completed.SharedInformers
			p := prober.New(c.Config().Failover, keys().probe, keys().signer, factory.Core().V1().Nodes())
			a := announcer.New(c.Config(), factory, client, c.Recorder(), p)
			c.OnConfigChange(a.SetConfig)
			// The conditions say what the announcer decided, so they follow it; with a
			// client of their own, whose rate limit their writes spend, not the
			// announcer's.
			conds := conditions.New(factory, completed.ClientBuilder.ClientOrDie(conditions.Name), c.Recorder(), a)
			go conds.Run(ctx, conditionWorkers)
			duties := duty.New(c.Config(), factory.Core().V1().Services(), factory.Core().V1().Nodes(), p)
			p.SetDuties(duties)
			c.OnConfigChange(duties.SetConfig)
			go duties.Run(ctx)
			go p.Run(ctx)
			go a.Run(ctx, announcerWorkers)
			page.Lead(&statuspage.Sources{
				Allocator: c, Announcer: a, Agents: p,
				Services: factory.Core().V1().Services().Lister(),
				Nodes:    factory.Core().V1().Nodes().Lister(),
			})
			return nil, true, nil
		}
	}
}

// startLBStatus runs the controller that keeps the Services' status true.
func startLBStatus(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		c := cloud.(*provider.Cloud)
		lb, _ := c.LoadBalancer()
		client := completed.ClientBuilder.ClientOrDie(initContext.ClientName)
		s := lbstatus.New(lb, c, completed.SharedInformers, client, c.Recorder())
		c.OnConfigChange(s.Resync)
		go s.Run(ctx, lbStatusWorkers)
		return nil, true, nil
	}
}

// startConfigReloader follows the cloud-config file: a valid change goes to the
// provider, which passes it on to the announcer and the status controller.
func startConfigReloader(interval func() time.Duration) app.InitFuncConstructor {
	return func(_ app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
		return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
			path := completed.ComponentConfig.KubeCloudShared.CloudProvider.CloudConfigFile
			legacyregistry.MustRegister(config.Metrics()...)
			go config.Watch(ctx, path, interval(), cloud.(*provider.Cloud).Config(), cloud.(*provider.Cloud).SetConfig)
			return nil, true, nil
		}
	}
}
