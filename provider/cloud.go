// Package provider is the "baremetal" cloud provider: a thin adapter between the
// Kubernetes cloud-controller-manager and the project's logic packages. LoadBalancer hands
// out Service addresses from the cloud-config's pools through package ipam.
package provider

import (
	"fmt"
	"io"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/keymutex"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
)

// Name is the provider name, as given to --cloud-provider.
const Name = "baremetal"

// component names the controller in the events it records.
const component = "baremetal-ccm"

func init() {
	cloudprovider.RegisterCloudProvider(Name, func(r io.Reader) (cloudprovider.Interface, error) {
		if r == nil {
			return nil, fmt.Errorf("provider %q needs a cloud-config (--cloud-config)", Name)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("reading cloud-config: %w", err)
		}
		cfg, err := config.Parse("cloud-config", data)
		if err != nil {
			return nil, err
		}
		return New(cfg), nil
	})
}

// Cloud implements cloudprovider.Interface for bare metal. Only LoadBalancer is offered:
// nodes, zones and routes are the operator's.
type Cloud struct {
	lb     *loadBalancer
	client kubernetes.Interface
	// announcerClient writes the announcer annotation, with a rate limit of its own.
	announcerClient kubernetes.Interface
	stop            <-chan struct{}
	// announcer is nil until this instance leads. The status page reads it from its own
	// goroutines, and answers as a standby while it is nil.
	announcer atomic.Pointer[announcerController]
}

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InformerUser = (*Cloud)(nil)
)

// New returns the provider for a validated cloud-config. It makes no API calls; those
// start with Initialize.
func New(cfg *config.Config) *Cloud {
	registerMetrics()
	return &Cloud{lb: &loadBalancer{cfg: cfg, alloc: ipam.New(cfg.Pools), locks: keymutex.NewHashed(0)}}
}

// Initialize starts the event recorder. The cloud-controller-manager calls it once this
// instance leads.
func (c *Cloud) Initialize(clientBuilder cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	client := clientBuilder.ClientOrDie(component)
	c.client, c.stop = client, stop
	// The announcer's patches get a client, and so a client-side rate limit, of their own:
	// a dead node that announced hundreds of Services needs that many patches at once, and
	// each one waiting behind --kube-api-qps is a Service whose clients wait too. The
	// API server's priority and fairness still bounds them.
	announcerConfig := clientBuilder.ConfigOrDie(component + "-announcer")
	announcerConfig.QPS, announcerConfig.Burst = max(announcerConfig.QPS, announcerQPS), max(announcerConfig.Burst, announcerBurst)
	c.announcerClient = kubernetes.NewForConfigOrDie(announcerConfig)
	broadcaster := record.NewBroadcaster(record.WithContext(wait.ContextForChannel(stop)))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	c.lb.recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: component})
	go func() {
		<-stop
		broadcaster.Shutdown()
	}()
	klog.InfoS("Initialized the baremetal cloud provider", "pools", len(c.lb.cfg.Pools))
}

// SetInformers gives the provider the Service cache it rebuilds the allocator from, and
// starts the announcer controller on the same caches.
func (c *Cloud) SetInformers(factory informers.SharedInformerFactory) {
	// Nothing here reads managedFields, and they are often the larger part of an object:
	// leaving them out of the caches halves what thousands of Services cost in memory.
	for _, inf := range []cache.SharedIndexInformer{
		factory.Core().V1().Services().Informer(),
		factory.Core().V1().Nodes().Informer(),
		factory.Discovery().V1().EndpointSlices().Informer(),
	} {
		if err := inf.SetTransform(StripManagedFields); err != nil {
			klog.InfoS("Informer already started; its objects keep their managedFields", "err", err)
		}
	}
	services := factory.Core().V1().Services()
	c.lb.services = services.Lister()
	c.lb.servicesSynced = services.Informer().HasSynced

	a := newAnnouncerController(c.lb.cfg, factory)
	a.client = c.announcerClient
	a.recorder = c.lb.recorder
	go a.Run(wait.ContextForChannel(c.stop), announcerWorkers)
	c.announcer.Store(a)
}

// announcerWorkers is how many address groups are decided at once. Decisions are cheap;
// the workers wait on their patches, so after a node failure this many patches are in
// flight.
const announcerWorkers = 16

// The announcer client's rate limit: enough for a node failure's burst of patches, one per
// Service the node announced, to go out without waiting.
const (
	announcerQPS   = 500
	announcerBurst = 1000
)

// LoadBalancer returns the Service address allocator.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lb, true }

// Instances is not offered: nodes are the operator's.
func (c *Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

// InstancesV2 is not offered: nodes are the operator's.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return nil, false }

// Zones is not offered.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not offered.
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes is not offered: pod networking is the CNI's.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return nil, false }

// ProviderName returns "baremetal".
func (c *Cloud) ProviderName() string { return Name }

// HasClusterID reports true: a bare-metal cluster has no cloud resources to tag, so there
// is nothing a cluster ID would tell apart.
func (c *Cloud) HasClusterID() bool { return true }

// StripManagedFields is an informer transform that drops an object's managedFields, which
// the provider never reads.
func StripManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}
