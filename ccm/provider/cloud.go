// Package provider is the "baremetal" cloud provider: a thin adapter between the
// Kubernetes cloud-controller-manager and the allocator. LoadBalancer hands out Service
// addresses from the cloud-config's pools through package ipam; choosing the node that
// announces them is package announcer's.
package provider

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
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

// component names the ccm in the events it records.
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
	lb *loadBalancer

	mu sync.Mutex
	// onConfig are told of every new cloud-config, after the allocator.
	onConfig []func(*config.Config)
}

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InformerUser = (*Cloud)(nil)
)

// New returns the provider for a validated cloud-config. It makes no API calls; those
// start with Initialize.
func New(cfg *config.Config) *Cloud {
	registerMetrics()
	lb := &loadBalancer{alloc: ipam.New(cfg.Pools), locks: keymutex.NewHashed(0)}
	lb.cfg.Store(cfg)
	return &Cloud{lb: lb}
}

// Initialize starts the event recorder. The cloud-controller-manager calls it once this
// instance leads.
func (c *Cloud) Initialize(clientBuilder cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	client := clientBuilder.ClientOrDie(component)
	broadcaster := record.NewBroadcaster(record.WithContext(wait.ContextForChannel(stop)))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	c.lb.recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: component})
	go func() {
		<-stop
		broadcaster.Shutdown()
	}()
	klog.InfoS("Initialized the baremetal cloud provider", "pools", len(c.lb.cfg.Load().Pools))
}

// Recorder returns the recorder of the ccm's events, for the controllers beside the
// provider. Nil before Initialize.
func (c *Cloud) Recorder() record.EventRecorder { return c.lb.recorder }

// SetInformers gives the provider the Service cache it rebuilds the allocator from, and
// leaves managedFields out of the caches that every controller of the ccm shares.
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
}

// Config returns the cloud-config in use.
func (c *Cloud) Config() *config.Config { return c.lb.cfg.Load() }

// OnConfigChange registers f to be called with every new cloud-config, once the
// allocator follows it.
func (c *Cloud) OnConfigChange(f func(*config.Config)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onConfig = append(c.onConfig, f)
}

// SetConfig puts a changed, valid cloud-config in use. Addresses that no pool contains any
// more are released, with a Warning event on their Services, which get new ones when their
// load balancer is next ensured; then the OnConfigChange functions are called.
func (c *Cloud) SetConfig(cfg *config.Config) {
	c.lb.setConfig(cfg)
	c.mu.Lock()
	listeners := slices.Clone(c.onConfig)
	c.mu.Unlock()
	for _, f := range listeners {
		f(cfg)
	}
}

// Pools returns the figures of every family of every pool, in config order.
func (c *Cloud) Pools() []ipam.Stats { return c.lb.alloc.Stats() }

// Restored reports whether the allocator holds the addresses of the Services' status:
// until then its figures are too low.
func (c *Cloud) Restored() bool { return c.lb.isRestored() }

// Holders returns the Services ("namespace/name") the allocator gave addr to.
func (c *Cloud) Holders(addr netip.Addr) []string { return c.lb.alloc.Holders(addr) }

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
// the ccm never reads.
func StripManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}
