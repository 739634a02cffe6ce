package announcer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// warnPartly tells m's owners that d.Node announces only part of the group's addresses,
// and why no node announces the rest.
func (c *Controller) warnPartly(m member, d pick.Decision, g pick.Group, unannounced string) {
	why := fmt.Sprintf("No node can announce %s; %s announces the rest of the addresses of %s", unannounced, d.Node, g.FirstIP)
	c.recorder.Event(m.svc, v1.EventTypeWarning, ReasonPartlyAnnounced, why)
	c.logChange(m.req.Service, ReasonPartlyAnnounced, d.Node, d, why)
	klog.V(2).InfoS("Addresses without an announcer", "service", klog.KObj(m.svc), "announcer", d.Node, "unannounced", unannounced)
}

// member is a Service of a group, with its request.
type member struct {
	svc *v1.Service
	req *annotation.Request
}

// sync applies the rule to one group and publishes the result. It is idempotent: with
// nothing changed, it writes nothing.
func (c *Controller) sync(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, "service/"); ok {
		return c.syncService(ctx, name)
	}
	if key == balanceKey {
		return c.syncBalance()
	}
	start, err := netip.ParseAddr(strings.TrimPrefix(key, "address/"))
	if err != nil {
		return nil // not a key this controller queues
	}
	members, stale, err := c.group(start)
	if err != nil {
		return err
	}
	for _, svc := range stale {
		// No address to announce any more: the annotation would mislead the agents.
		if err := c.setPlan(ctx, svc, plan{}); err != nil {
			return err
		}
	}
	if len(members) == 0 {
		c.forget(key)
		return nil
	}
	g, err := c.ruleGroup(members)
	if err != nil {
		return err
	}
	if first := addressKey(netip.MustParseAddr(g.FirstIP)); first != key {
		// A lower address joined the group: it is decided under that name now.
		c.forget(key)
		c.queue.Add(first)
		return nil
	}
	nodes, err := c.nodeStates()
	if err != nil {
		return err
	}
	r, ok, err := c.ranking(key, g, nodes)
	if err != nil || !ok {
		return err
	}
	d := pick.Decision{Reason: r.Reason, Why: r.Why}
	var p plan
	if len(r.Nodes) > 0 {
		d.Node = r.Nodes[0]
		p = plan{announcer: d.Node, standbys: strings.Join(r.Nodes[1:], ",")}
	}
	unannounced := pick.Unannounced(g, nodes, d.Node)
	warn := c.remember(key, members, g, nodes, d, unannounced)
	c.account(key, ownership{node: d.Node, services: len(members)})
	c.hold(key, members, d.Node)
	for _, m := range members {
		if warn && unannounced != "" {
			c.warnPartly(m, d, g, unannounced)
		}
		prev := m.req.Announcer
		if c.written(m.svc, p) {
			continue // this ccm wrote it already; the cache has not seen the patch yet
		}
		if prev == d.Node {
			if d.Node == "" && warn {
				why := pick.Explain(prev, g, nodes, d)
				c.recorder.Eventf(m.svc, v1.EventTypeWarning, ReasonNoAnnouncer, "No node announces %s: %s", g.FirstIP, why)
				c.logChange(m.req.Service, ReasonNoAnnouncer, prev, d, why)
			}
			if strings.Join(m.req.Standbys, ",") != p.standbys {
				// The standby order changed alone: the agents need it before the
				// announcer fails, and nobody needs an event for it; unless it only
				// names nodes back from down lately, which may be flapping.
				standbys := r.Nodes[min(1, len(r.Nodes)):]
				if hold := holdStandbys(m.req.Standbys, standbys, c.returns.holding(standbys, time.Now()), nodes); hold > 0 {
					standbysHeld.Inc()
					klog.V(4).InfoS("Standbys kept while the nodes they would name hold up", "service", klog.KObj(m.svc), "standbys", m.req.Standbys, "wouldBe", p.standbys, "for", hold)
					c.queue.AddAfter(key, hold)
					continue
				}
				if err := c.setPlan(ctx, m.svc, p); err != nil {
					return err
				}
				c.wrote(m.svc, p)
				klog.V(2).InfoS("Standbys changed", "service", klog.KObj(m.svc), "announcer", d.Node, "from", m.req.Standbys, "to", p.standbys)
			}
			continue
		}
		why := pick.Explain(prev, g, nodes, d)
		if err := c.setPlan(ctx, m.svc, p); err != nil {
			return err
		}
		c.wrote(m.svc, p)
		announcerChanges.WithLabelValues(string(d.Reason)).Inc()
		if d.Node == "" {
			c.recorder.Eventf(m.svc, v1.EventTypeWarning, ReasonNoAnnouncer, "No node announces %s: %s", g.FirstIP, why)
			c.logChange(m.req.Service, ReasonNoAnnouncer, prev, d, why)
		} else {
			c.recorder.Eventf(m.svc, v1.EventTypeNormal, ReasonAnnouncerChanged, "Announcer of %s changed from %q to %q: %s", g.FirstIP, prev, d.Node, why)
			c.logChange(m.req.Service, ReasonAnnouncerChanged, prev, d, why)
		}
		klog.V(2).InfoS("Announcer changed", "service", klog.KObj(m.svc), "from", prev, "to", d.Node, "reason", why)
	}
	return nil
}

// syncService handles a Service that had no address when it was queued: one whose
// addresses were withdrawn keeps no announcer.
func (c *Controller) syncService(ctx context.Context, name string) error {
	ns, n, err := cache.SplitMetaNamespaceKey(name)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(ns).Get(n)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	r, _ := annotation.Parse(svc)
	if r.Announced() {
		c.enqueueService(svc) // its addresses' groups decide
		return nil
	}
	if r.Announcer == "" && len(r.Standbys) == 0 {
		return nil
	}
	return c.setPlan(ctx, svc, plan{})
}

// group returns the Services to announce that hold start, or hold an address that such
// a Service holds, and so on: every Service whose announcer must be the same. They come
// sorted by name. stale are the Services met on the way that are not to be announced
// (being deleted, no longer ours) but still name an announcer.
func (c *Controller) group(start netip.Addr) (members []member, stale []*v1.Service, err error) {
	todo := []netip.Addr{start}
	seenAddr := map[netip.Addr]bool{start: true}
	seenSvc := map[string]bool{}
	for len(todo) > 0 {
		a := todo[0]
		todo = todo[1:]
		objs, err := c.serviceIndexer.ByIndex(byAddress, a.String())
		if err != nil {
			return nil, nil, err
		}
		for _, o := range objs {
			svc := o.(*v1.Service)
			r, _ := annotation.Parse(svc)
			if seenSvc[r.Service] {
				continue
			}
			seenSvc[r.Service] = true
			if !r.Announced() {
				if r.Announcer != "" {
					stale = append(stale, svc)
				}
				continue
			}
			members = append(members, member{svc: svc, req: r})
			for _, other := range r.Ingress {
				if !seenAddr[other] {
					seenAddr[other] = true
					todo = append(todo, other)
				}
			}
		}
	}
	slices.SortFunc(members, func(x, y member) int { return strings.Compare(x.req.Service, y.req.Service) })
	return members, stale, nil
}

// ruleGroup gathers the rule's view of a group's members.
func (c *Controller) ruleGroup(members []member) (pick.Group, error) {
	cfg := c.cfg.Load()
	g := pick.Group{Endpoints: map[string]int{}}
	var addrs []netip.Addr
	for _, m := range members {
		addrs = append(addrs, m.req.Ingress...)
		endpoints, err := c.readyEndpoints(m.svc)
		if err != nil {
			return g, err
		}
		for node, n := range endpoints {
			g.Endpoints[node] += n
		}
		if m.req.Local {
			g.Local = append(g.Local, pick.LocalService{Service: m.req.Service, Endpoints: endpoints})
		}
		if g.PreferredNodes == nil && len(m.req.PreferredNodes) > 0 {
			g.PreferredNodes = m.req.PreferredNodes
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	g.FirstIP = addrs[0].String()
	for _, a := range addrs {
		p := cfg.PoolFor(a)
		if p == nil {
			continue
		}
		i := slices.IndexFunc(g.Pools, func(pn pick.PoolNodes) bool { return pn.Pool == p.Name })
		if i < 0 {
			i = len(g.Pools)
			g.Pools = append(g.Pools, pick.PoolNodes{Pool: p.Name, NodeSelector: p.NodeSelector})
		}
		g.Pools[i].Families[iprange.FamilyOf(a)] = true
	}
	if !cfg.Failover.Failback {
		g.Current = c.current(addressKey(addrs[0]), members)
	}
	for _, m := range members {
		if g.Plan = m.req.Plan(); len(g.Plan) > 0 {
			break
		}
	}
	return g, nil
}

// current is the node announcing the group now: this ccm's last decision, or, before
// it made one, the node most members' annotations name (another ccm's, or this one's
// before a restart).
func (c *Controller) current(key string, members []member) string {
	c.mu.Lock()
	d, ok := c.decided[key]
	c.mu.Unlock()
	if ok && d.node != "" {
		return d.node
	}
	counts := map[string]int{}
	best := ""
	for _, m := range members {
		if n := m.req.Announcer; n != "" {
			counts[n]++
			if counts[n] > counts[best] {
				best = n
			}
		}
	}
	return best
}

// readyEndpoints counts a Service's ready, non-terminating endpoints per node.
func (c *Controller) readyEndpoints(svc *v1.Service) (map[string]int, error) {
	slices, err := c.sliceIndexer.ByIndex(byService, svc.Namespace+"/"+svc.Name)
	if err != nil {
		return nil, err
	}
	// A dual-stack Service has a slice per address family, each listing the same pods:
	// counted per family, a node has as many endpoints as its best family lists.
	byFamily := map[discoveryv1.AddressType]map[string]int{}
	for _, o := range slices {
		s := o.(*discoveryv1.EndpointSlice)
		counts := byFamily[s.AddressType]
		if counts == nil {
			counts = map[string]int{}
			byFamily[s.AddressType] = counts
		}
		for _, ep := range s.Endpoints {
			// A nil Ready means unknown, which consumers are to take as ready.
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			if ep.NodeName != nil && ready && !terminating {
				counts[*ep.NodeName]++
			}
		}
	}
	out := map[string]int{}
	for _, counts := range byFamily {
		for node, n := range counts {
			out[node] = max(out[node], n)
		}
	}
	return out, nil
}

func (c *Controller) nodeStates() ([]pick.Node, error) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]pick.Node, 0, len(nodes))
	now := time.Now()
	for _, n := range nodes {
		// Only an agent that is up may announce: one that is replaced is in the verdict, and
		// announces nothing until the annotations say what the agents standing in did.
		h := c.health.Health(n.Name)
		c.returns.observe(n.Name, h == liveness.Down, now)
		// A Drain value that cannot be read drains nothing; the Node's event says so.
		m, _ := c.maintenance(n)
		node := pick.Node{Name: n.Name, Labels: n.Labels, Deleting: n.DeletionTimestamp != nil, OutOfService: m.OutOfService, Drained: m.Drained,
			Healthy: h == liveness.Up, Draining: h == liveness.Draining, Starting: h == liveness.Starting}
		for _, u := range c.health.Unable(n.Name) {
			node.Unable = append(node.Unable, pick.Unable{Pool: u.Pool, Family: u.Family, Why: u.Explain(n.Name)})
		}
		out = append(out, node)
	}
	// Sorted, so that a decision of every group on the same nodes is known as such.
	slices.SortFunc(out, func(a, b pick.Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// maxStandbys is how many standbys a plan names: enough that an address survives two
// nodes dying at once without the API server, few enough that the order rarely changes.
const maxStandbys = 2

// plan is what the ccm publishes for a group: the announcer and its standbys, as the
// annotations hold them.
type plan struct {
	announcer string
	standbys  string // comma-separated
}

// setPlan writes the announcer and standby annotations, or removes those that are empty,
// with a merge patch of those two keys, so no other field can be overwritten.
func (c *Controller) setPlan(ctx context.Context, svc *v1.Service, p plan) error {
	value := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		annotation.Announcer: value(p.announcer),
		annotation.Standbys:  value(p.standbys),
	}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch %s of %s/%s: %w", annotation.Announcer, svc.Namespace, svc.Name, err)
	}
	return nil
}

// written reports whether this ccm patched svc's plan to p while the cache still holds
// the object it decided on: syncing again before the watch delivers the patch must not
// patch, and tell the Service's events, a second time.
func (c *Controller) written(svc *v1.Service, p plan) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.patched[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}]
	return ok && w.resourceVersion == svc.ResourceVersion && w.plan == p
}

// wrote records that svc, as the cache holds it, was patched to hold p.
func (c *Controller) wrote(svc *v1.Service, p plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	c.patched[key] = patch{resourceVersion: svc.ResourceVersion, plan: p}
}

// patch is a plan patch of this ccm, and the version of the Service it was based on.
type patch struct {
	resourceVersion string
	plan            plan
}
