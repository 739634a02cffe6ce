package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// The fields of each mapping, in the order of the documentation, which is also the order
// they are listed in when an unknown one is reported.
var (
	configFields        = []string{"pools", "failover", "announcements", "maintenance"}
	poolFields          = []string{"name", "addresses", "autoAssign", "avoidBuggyIPs", "namespaces", "serviceSelector", "nodeSelector", "interfaces"}
	selectorFields      = []string{"matchLabels", "matchExpressions"}
	requirementFields   = []string{"key", "operator", "values"}
	failoverFields      = []string{"probeInterval", "failureThreshold", "busyTimeout", "agentPort", "isolationShare", "failback", "rebalance"}
	announcementsFields = []string{"refreshInterval", "checkInterval"}
	maintenanceFields   = []string{"drainOnCordon"}
)

const dnsLabelRule = "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"

// checker turns the YAML tree of a cloud-config into a Config, noting every problem on the
// way rather than stopping at the first. It walks the tree itself, rather than letting yaml
// decode into structs, so that each problem knows its line and field path, every unknown
// field is reported, and a wrong type is reported without hiding the rest of the file.
type checker struct {
	file     string
	problems []*problem
	// spans are every address range written, in the order written, to look for overlaps
	// once all pools are read.
	spans []span
}

// span is an address range as written, to report overlaps with.
type span struct {
	r     iprange.Range
	text  string // as written
	path  string // as in pools[1].addresses[0]
	pool  string
	line  int
	order int // position in the file
}

func (c *checker) document(data []byte) *Config {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		c.syntaxError(err)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		c.add(next.Line, "", "a second YAML document starts here; the cloud-config must be a single document")
	case !errors.Is(err, io.EOF):
		c.syntaxError(err)
		return nil
	}
	if len(doc.Content) == 0 {
		// An empty file: report what it lacks.
		return c.config(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"})
	}
	return c.config(doc.Content[0])
}

func (c *checker) config(n *yaml.Node) *Config {
	cfg := &Config{Failover: defaultFailover, Announcements: defaultAnnouncements}
	var pools *yaml.Node
	if !isNull(n) {
		if n.Kind != yaml.MappingNode {
			c.add(n.Line, "", "the cloud-config must be a mapping with the fields %s and %s, not %s", strings.Join(configFields[:len(configFields)-1], ", "), configFields[len(configFields)-1], describe(n))
			return nil
		}
		c.fields(n, "", configFields, func(field string, v *yaml.Node, path string) {
			switch field {
			case "pools":
				pools = v
				c.pools(cfg, v, path)
			case "failover":
				cfg.Failover = c.failover(v, path)
			case "announcements":
				cfg.Announcements = c.announcements(v, path)
			case "maintenance":
				cfg.Maintenance = c.maintenance(v, path)
			}
		})
	}
	if pools == nil || pools.Kind == yaml.SequenceNode && len(pools.Content) == 0 {
		line := n.Line
		if pools != nil {
			line = pools.Line
		}
		c.add(line, "pools", "no pools; define at least one, with a name and addresses")
	}
	c.checkOverlaps()
	return cfg
}

func (c *checker) pools(cfg *Config, n *yaml.Node, path string) {
	type named struct {
		path string
		line int
	}
	names := make(map[string]named)
	c.list(n, path, func(item *yaml.Node, path string) {
		p, nameLine := c.pool(item, path)
		if p == nil {
			return
		}
		if p.Name != "" {
			if first, ok := names[p.Name]; ok {
				c.add(nameLine, path+".name", "pool name %q is already used by %s at line %d; pool names must be unique", p.Name, first.path, first.line)
			} else {
				names[p.Name] = named{path, nameLine}
			}
		}
		cfg.Pools = append(cfg.Pools, *p)
	})
}

// pool reads one pool, and the line of its name; it returns nil if n is not even a mapping.
func (c *checker) pool(n *yaml.Node, path string) (*Pool, int) {
	p := &Pool{AutoAssign: true, ServiceSelector: labels.Everything(), NodeSelector: labels.Everything()}
	var nameNode, addresses *yaml.Node
	var spans []span
	ok := c.fields(n, path, poolFields, func(field string, v *yaml.Node, path string) {
		switch field {
		case "name":
			nameNode = v
			p.Name, _ = c.str(v, path)
		case "addresses":
			addresses = v
			c.list(v, path, func(item *yaml.Node, path string) {
				if s, r, ok := c.addressRange(item, path); ok {
					p.Ranges = append(p.Ranges, r)
					spans = append(spans, span{r: r, text: s, path: path, line: item.Line})
				}
			})
		case "autoAssign":
			if b, ok := c.boolean(v, path); ok {
				p.AutoAssign = b
			}
		case "avoidBuggyIPs":
			if b, ok := c.boolean(v, path); ok {
				p.AvoidBuggyIPs = b
			}
		case "namespaces":
			c.list(v, path, func(item *yaml.Node, path string) {
				if ns, ok := c.namespace(item, path); ok {
					p.Namespaces = append(p.Namespaces, ns)
				}
			})
		case "serviceSelector":
			p.ServiceSelector = c.selector(v, path)
		case "nodeSelector":
			p.NodeSelector = c.selector(v, path)
		case "interfaces":
			c.list(v, path, func(item *yaml.Node, path string) {
				if name, ok := c.str(item, path); ok {
					if name == "" {
						c.add(item.Line, path, "empty interface name; remove the entry or name an interface, such as \"eth0\"")
						return
					}
					p.Interfaces = append(p.Interfaces, name)
				}
			})
		}
	})
	if !ok {
		return nil, 0
	}
	switch {
	case nameNode == nil:
		c.add(n.Line, path+".name", "missing; every pool needs a unique name, such as \"default\"")
	case nameNode.Kind == yaml.ScalarNode && p.Name == "":
		c.add(nameNode.Line, path+".name", "empty; every pool needs a unique name, such as \"default\"")
	case p.Name != "" && len(validation.IsDNS1123Label(p.Name)) > 0:
		c.add(nameNode.Line, path+".name", "invalid pool name %q; %s", p.Name, dnsLabelRule)
	}
	if addresses == nil || addresses.Kind == yaml.SequenceNode && len(addresses.Content) == 0 {
		line := n.Line
		if addresses != nil {
			line = addresses.Line
		}
		c.add(line, path+".addresses", "no addresses; list at least one CIDR (198.51.100.0/24) or range (198.51.100.10-198.51.100.50)")
	}
	for _, s := range spans {
		s.pool = p.Name
		// Here rather than as each range is read: the report names the pool, whose name
		// may come after its addresses.
		if err := iprange.CheckServiceRange(s.r); err != nil {
			c.add(s.line, s.path, "%s%s: %v", s.text, poolNote(p.Name), err)
			continue
		}
		s.order = len(c.spans)
		c.spans = append(c.spans, s)
	}
	if nameNode == nil {
		return p, 0
	}
	return p, nameNode.Line
}

// addressRange reads a CIDR or range, returning it also as written, with the spaces
// squeezed to keep a report on one line.
func (c *checker) addressRange(n *yaml.Node, path string) (string, iprange.Range, bool) {
	s, ok := c.str(n, path)
	if !ok {
		return "", iprange.Range{}, false
	}
	r, err := iprange.Parse(s)
	if err != nil {
		c.add(n.Line, path, "%v", err)
		return "", iprange.Range{}, false
	}
	return strings.Join(strings.Fields(s), " "), r, true
}

func (c *checker) namespace(n *yaml.Node, path string) (string, bool) {
	ns, ok := c.str(n, path)
	switch {
	case !ok:
		return "", false
	case ns == "":
		c.add(n.Line, path, "empty namespace name; remove the entry or name a namespace")
		return "", false
	case len(validation.IsDNS1123Label(ns)) > 0:
		c.add(n.Line, path, "invalid namespace name %q; %s", ns, dnsLabelRule)
		return "", false
	}
	return ns, true
}

// selector reads a label selector and converts it through metav1, so that a bad selector
// gets the same message as in any Kubernetes object. Each label and expression is converted
// on its own first, to report every bad one at its own line; the ones left then make a
// valid selector.
func (c *checker) selector(n *yaml.Node, path string) labels.Selector {
	var ls metav1.LabelSelector
	c.fields(n, path, selectorFields, func(field string, v *yaml.Node, path string) {
		switch field {
		case "matchLabels":
			c.entries(v, path, "label", func(k, v *yaml.Node) {
				path := fmt.Sprintf("%s[%q]", path, k.Value)
				var value string
				if !isNull(v) { // as yaml does, take "tier:" for an empty value
					var ok bool
					if value, ok = c.str(v, path); !ok {
						return
					}
				}
				one := &metav1.LabelSelector{MatchLabels: map[string]string{k.Value: value}}
				if _, err := metav1.LabelSelectorAsSelector(one); err != nil {
					c.add(k.Line, path, "%v", err)
					return
				}
				if ls.MatchLabels == nil {
					ls.MatchLabels = make(map[string]string)
				}
				ls.MatchLabels[k.Value] = value
			})
		case "matchExpressions":
			c.list(v, path, func(item *yaml.Node, path string) {
				if req, ok := c.requirement(item, path); ok {
					ls.MatchExpressions = append(ls.MatchExpressions, req)
				}
			})
		}
	})
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		c.add(n.Line, path, "%v", err)
		return labels.Everything()
	}
	return sel
}

var operators = []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}

func (c *checker) requirement(n *yaml.Node, path string) (metav1.LabelSelectorRequirement, bool) {
	var req metav1.LabelSelectorRequirement
	// Once a part is reported, checking the rest would only add confusing problems, such
	// as an empty list of values after the only value was refused.
	reported := false
	ok := c.fields(n, path, requirementFields, func(field string, v *yaml.Node, path string) {
		good := true
		switch field {
		case "key":
			req.Key, good = c.str(v, path)
		case "operator":
			var op string
			op, good = c.str(v, path)
			req.Operator = metav1.LabelSelectorOperator(op)
		case "values":
			isList := c.list(v, path, func(item *yaml.Node, path string) {
				value, ok := c.str(item, path)
				req.Values = append(req.Values, value)
				good = good && ok
			})
			good = good && isList
		}
		reported = reported || !good
	})
	if !ok || reported {
		return req, false
	}
	one := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req}}
	if _, err := metav1.LabelSelectorAsSelector(one); err != nil {
		if !slices.Contains(operators, req.Operator) {
			c.add(n.Line, path, "%v; use In, NotIn, Exists or DoesNotExist", err)
		} else {
			c.add(n.Line, path, "%v", err)
		}
		return req, false
	}
	return req, true
}

func (c *checker) failover(n *yaml.Node, path string) Failover {
	f := defaultFailover
	c.fields(n, path, failoverFields, func(field string, v *yaml.Node, path string) {
		switch field {
		case "probeInterval":
			if d, ok := c.duration(v, path, 10*time.Millisecond, 10*time.Second); ok {
				f.ProbeInterval = d
			}
		case "failureThreshold":
			if i, ok := c.integer(v, path, 1, 100); ok {
				f.FailureThreshold = i
			}
		case "busyTimeout":
			if d, ok := c.duration(v, path, 100*time.Millisecond, 5*time.Minute); ok {
				f.BusyTimeout = d
			}
		case "agentPort":
			if i, ok := c.integer(v, path, 1, 65535); ok {
				f.AgentPort = i
			}
		case "isolationShare":
			if x, ok := c.share(v, path); ok {
				f.IsolationShare = x
			}
		case "failback":
			if b, ok := c.boolean(v, path); ok {
				f.Failback = b
			}
		case "rebalance":
			if b, ok := c.boolean(v, path); ok {
				f.Rebalance = b
			}
		}
	})
	return f
}

// Bounds of announcements.refreshInterval and checkInterval: more often than every second
// would only load every host of the segment, and less often than hourly keeps nothing
// fresh and finds nothing in time.
const (
	minRefreshInterval = time.Second
	maxRefreshInterval = time.Hour
)

func (c *checker) announcements(n *yaml.Node, path string) Announcements {
	a := defaultAnnouncements
	c.fields(n, path, announcementsFields, func(field string, v *yaml.Node, path string) {
		switch field {
		case "refreshInterval":
			if d, ok := c.interval(v, path, "60s"); ok {
				a.RefreshInterval = d
			}
		case "checkInterval":
			if d, ok := c.interval(v, path, "20s"); ok {
				a.CheckInterval = d
			}
		}
	})
	return a
}

// interval reads a period that off turns off: off (or 0), or a duration within the
// bounds of announcements.refreshInterval. example is how the error shows one.
func (c *checker) interval(v *yaml.Node, path, example string) (time.Duration, bool) {
	// off reads better than 0 for a switch turned off; both mean it.
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Value == "off" {
		return 0, true
	}
	want := fmt.Sprintf("off (or 0), or a duration from 1s to 1h, such as %q", example)
	return c.durationWant(v, path, want, minRefreshInterval, maxRefreshInterval, 0)
}

func (c *checker) maintenance(n *yaml.Node, path string) Maintenance {
	var m Maintenance
	c.fields(n, path, maintenanceFields, func(field string, v *yaml.Node, path string) {
		switch field {
		case "drainOnCordon":
			if b, ok := c.boolean(v, path); ok {
				m.DrainOnCordon = b
			}
		}
	})
	return m
}

// fields hands set the value of each field written in the mapping n at path, and reports
// whether n is a mapping. A field set to null counts as not written, as in Kubernetes
// objects. known lists the fields there may be.
func (c *checker) fields(n *yaml.Node, path string, known []string, set func(field string, v *yaml.Node, path string)) bool {
	return c.entries(n, path, "field", func(k, v *yaml.Node) {
		switch {
		case !slices.Contains(known, k.Value):
			c.unknownField(k, path, known)
		case !isNull(v):
			set(k.Value, v, joinPath(path, k.Value))
		}
	})
}

// entries hands f each key and value of the mapping n at path, and reports whether n is a
// mapping. Keys that are not strings, or that repeat, are reported and skipped; noun says
// what a key is, for those reports.
func (c *checker) entries(n *yaml.Node, path, noun string, f func(k, v *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		c.unexpected(n, path, "a mapping")
		return false
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			c.add(k.Line, path, "a %s name must be a string, not %s", noun, describe(k))
			continue
		}
		if line, ok := seen[k.Value]; ok {
			c.add(k.Line, path, "%s %q is set twice (first at line %d); keep one", noun, k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		f(k, v)
	}
	return true
}

func (c *checker) unknownField(k *yaml.Node, path string, known []string) {
	for _, f := range known {
		if strings.EqualFold(f, k.Value) {
			c.add(k.Line, path, "unknown field %q; did you mean %q?", k.Value, f)
			return
		}
	}
	c.add(k.Line, path, "unknown field %q; the fields here are %s", k.Value, strings.Join(known, ", "))
}

// list hands f each item of the sequence n at path, and reports whether n is a sequence.
func (c *checker) list(n *yaml.Node, path string, f func(item *yaml.Node, path string)) bool {
	if n.Kind != yaml.SequenceNode {
		c.unexpected(n, path, "a list")
		return false
	}
	for i, item := range n.Content {
		f(item, fmt.Sprintf("%s[%d]", path, i))
	}
	return true
}

// str reads any scalar as a string, as yaml does: a namespace may well be called "123".
func (c *checker) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		c.unexpected(n, path, "a string")
		return "", false
	}
	return n.Value, true
}

// boolean reads true or false; yes, no, on and off are strings in YAML 1.2 and refused.
func (c *checker) boolean(n *yaml.Node, path string) (bool, bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		c.unexpected(n, path, "true or false")
		return false, false
	}
	return b, true
}

func (c *checker) integer(n *yaml.Node, path string, lo, hi int) (int, bool) {
	var i int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil || i < lo || i > hi {
		c.unexpected(n, path, fmt.Sprintf("an integer from %d to %d", lo, hi))
		return 0, false
	}
	return i, true
}

// share reads a fraction above 0 and at most 1, such as 0.5.
func (c *checker) share(n *yaml.Node, path string) (float64, bool) {
	var x float64
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (tag != "!!float" && tag != "!!int") || n.Decode(&x) != nil || !(x > 0 && x <= 1) {
		c.unexpected(n, path, "a fraction above 0 and at most 1, such as 0.5")
		return 0, false
	}
	return x, true
}

func (c *checker) duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	return c.durationWant(n, path, fmt.Sprintf("a duration from %v to %v, such as \"100ms\"", lo, hi), lo, hi)
}

// durationWant reads a Go duration from lo to hi, or one of also, and reports any other
// value as not being want.
func (c *checker) durationWant(n *yaml.Node, path, want string, lo, hi time.Duration, also ...time.Duration) (time.Duration, bool) {
	d, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil || (d < lo || d > hi) && !slices.Contains(also, d) {
		c.unexpected(n, path, want)
		return 0, false
	}
	return d, true
}

// checkOverlaps reports every range that shares an address with another. Sorted by first
// address, a range overlaps an earlier one exactly when it starts at or before the furthest
// end seen so far in its family: one pass finds them all without comparing every pair, and
// without counting a single address of what may be a /48.
func (c *checker) checkOverlaps() {
	spans := c.spans
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(a.r.First.Compare(b.r.First), cmp.Compare(a.order, b.order))
	})
	var reach *span // the span that ends furthest so far
	for i := range spans {
		s := &spans[i]
		if reach != nil && reach.r.Overlaps(s.r) {
			// Report at the one written later, against the one the reader has already seen.
			later, earlier := s, reach
			if later.order < earlier.order {
				later, earlier = earlier, later
			}
			c.add(later.line, "", "%s %s%s overlaps %s %s%s at %s",
				later.path, later.text, poolNote(later.pool), earlier.path, earlier.text, poolNote(earlier.pool), s.r.First)
		}
		if reach == nil || reach.r.Is4() != s.r.Is4() || reach.r.Last.Less(s.r.Last) {
			reach = s
		}
	}
}

func poolNote(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" (pool %q)", name)
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}
