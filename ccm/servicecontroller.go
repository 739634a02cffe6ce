package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/provider"
)

// startServiceController runs the upstream service controller on a Service informer of its
// own that never shows it the announcer annotation.
//
// The upstream controller re-runs EnsureLoadBalancer, with two events, on any annotation
// change, and the announcer is not an input of EnsureLoadBalancer: letting it see the
// annotation would turn every announcer change (one patch, one event) into a patch and
// three events. Its status and finalizer patches are computed between two copies of that
// filtered object, so they never touch the annotation either.
func startServiceController(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, controllerContext genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		client := completed.ClientBuilder.ClientOrDie(initContext.ClientName)
		services := informers.NewSharedInformerFactoryWithOptions(client, app.ResyncPeriod(completed)(),
			informers.WithTransform(withoutAnnouncer))
		c, err := servicecontroller.New(cloud, client,
			services.Core().V1().Services(),
			completed.SharedInformers.Core().V1().Nodes(),
			completed.ComponentConfig.KubeCloudShared.ClusterName,
			utilfeature.DefaultFeatureGate)
		if err != nil {
			klog.ErrorS(err, "Failed to start the service controller")
			return nil, false, err
		}
		services.Start(ctx.Done())
		go c.Run(ctx, int(completed.ComponentConfig.ServiceController.ConcurrentServiceSyncs), controllerContext.ControllerManagerMetrics)
		return nil, true, nil
	}
}

// withoutAnnouncer is an informer transform that drops the announcer's annotations (the
// plan is not the load balancer), and the managedFields the service controller never
// reads.
func withoutAnnouncer(obj any) (any, error) {
	if svc, ok := obj.(*v1.Service); ok {
		delete(svc.Annotations, annotation.Announcer)
		delete(svc.Annotations, annotation.Standbys)
	}
	return provider.StripManagedFields(obj)
}
