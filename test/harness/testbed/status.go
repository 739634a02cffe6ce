package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// statusAddress is where StartCCM has the ccm serve its status page, in the bridge's
// namespace (one per testbed, so testbeds never share it).
const statusAddress = "127.0.0.1:7476"

// Status is what the tests read of the ccm's /status.json: the fields docs/operations.md
// documents, decoded from the wire as an operator's tool would, not from the ccm's types.
type Status struct {
	Leader bool `json:"leader"`
	// Synced is false while the leader is still filling its caches, probing the agents
	// for the first time or restoring the addresses of the Services' status.
	Synced   bool            `json:"synced"`
	Services []ServiceStatus `json:"services"`
	Agents   []AgentStatus   `json:"agents"`
}

// ServiceStatus is a Service with addresses, as the status page shows it.
type ServiceStatus struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Addresses []string `json:"addresses"`
	// Announcer is the node the announcer annotation names.
	Announcer string `json:"announcer"`
	// Decided is set while the ccm's decision differs from Announcer: the annotation is
	// being written.
	Decided *string `json:"decided,omitempty"`
	// Reason is empty until the ccm (this leader) has decided the Service's announcer.
	Reason string    `json:"reason,omitempty"`
	Why    string    `json:"why,omitempty"`
	Since  time.Time `json:"since,omitzero"`
}

// AgentStatus is a node's agent as the ccm's prober sees it.
type AgentStatus struct {
	Node string `json:"node"`
	// State is up, down, draining or unknown.
	State string `json:"state"`
}

// Service returns the status of Service namespace/name, or nil if the page lacks it.
func (s *Status) Service(namespace, name string) *ServiceStatus {
	for i := range s.Services {
		if s.Services[i].Namespace == namespace && s.Services[i].Name == name {
			return &s.Services[i]
		}
	}
	return nil
}

// Agent returns the state of node's agent, or "" if the page lacks the node.
func (s *Status) Agent(node string) string {
	for _, a := range s.Agents {
		if a.Node == node {
			return a.State
		}
	}
	return ""
}

// Settled reports whether the leader has synced, every one of nodes has its agent up,
// and every Service's announcer has been decided by this leader and is what the
// annotation says; if not, why not.
func (s *Status) Settled(nodes []string) (bool, string) {
	if !s.Leader || !s.Synced {
		return false, fmt.Sprintf("leader %v, synced %v", s.Leader, s.Synced)
	}
	for _, n := range nodes {
		if st := s.Agent(n); st != "up" {
			return false, fmt.Sprintf("agent of %s is %q", n, st)
		}
	}
	for _, svc := range s.Services {
		switch {
		case svc.Reason == "":
			return false, fmt.Sprintf("Service %s/%s has no decision yet", svc.Namespace, svc.Name)
		case svc.Decided != nil:
			return false, fmt.Sprintf("Service %s/%s: announcer %q, decided %q, not written yet", svc.Namespace, svc.Name, svc.Announcer, *svc.Decided)
		}
	}
	return true, ""
}

// Status fetches and decodes the status page of the leading ccm of those StartCCM and
// StartCCMOn started. No ccm that runs and leads is an error.
func (c *Cluster) Status(ctx context.Context) (*Status, error) {
	c.mu.Lock()
	hosts := slices.Clone(c.statusHosts)
	c.mu.Unlock()
	err := errors.New("no ccm started")
	for _, h := range hosts {
		var st *Status
		if st, err = c.statusOf(ctx, h); err == nil {
			return st, nil
		}
	}
	return nil, err
}

func (c *Cluster) statusOf(ctx context.Context, h *netns.Host) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	client := http.Client{Transport: &http.Transport{DialContext: h.Dial, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+statusAddress+"/status.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /status.json on %s: %s: %s", h.Label, resp.Status, strings.TrimSpace(string(body)))
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode /status.json: %w", err)
	}
	return &st, nil
}

// WaitStatus polls the ccm's status page until cond holds, for up to timeout, and returns
// the status that satisfied it. cond says why not when it does not hold; the error at the
// timeout gives the last reason.
func (c *Cluster) WaitStatus(ctx context.Context, timeout time.Duration, cond func(*Status) (bool, string)) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var why string
	for {
		st, err := c.Status(ctx)
		if err == nil {
			var ok bool
			if ok, why = cond(st); ok {
				return st, nil
			}
		} else {
			why = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ccm status after %v: %s", timeout, why)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitSettled waits up to 15 s for the ccm to be settled: it leads and has synced, every
// node's agent is up, and every Service has an announcer it decided and wrote. It
// returns that status.
func (c *Cluster) WaitSettled(ctx context.Context) (*Status, error) {
	nodes := c.NodeNames()
	return c.WaitStatus(ctx, 15*time.Second, func(st *Status) (bool, string) { return st.Settled(nodes) })
}

// NodeNames returns the names of the testbed's nodes, node1 first.
func (c *Cluster) NodeNames() []string {
	var names []string
	for _, h := range c.Net.Nodes {
		names = append(names, h.Label)
	}
	return names
}
