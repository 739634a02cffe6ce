package annotation

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Cache keeps each Service's request as Parse read it from one version, so that a
// computation over thousands of Services that changed nothing but a verdict or a few
// annotations does not read them all again. Not safe for concurrent use.
type Cache struct {
	parsed map[types.UID]parsed
}

type parsed struct {
	resourceVersion string
	req             *Request
}

// Requests returns the requests of the Services, in their order, parsing only the
// versions not parsed before; it forgets the Services not passed.
func (c *Cache) Requests(services []*v1.Service) []*Request {
	next := make(map[types.UID]parsed, len(services))
	out := make([]*Request, 0, len(services))
	for _, svc := range services {
		p, ok := c.parsed[svc.UID]
		if !ok || p.resourceVersion != svc.ResourceVersion || svc.ResourceVersion == "" {
			p.resourceVersion = svc.ResourceVersion
			p.req, _ = Parse(svc)
		}
		next[svc.UID] = p
		out = append(out, p.req)
	}
	c.parsed = next
	return out
}
