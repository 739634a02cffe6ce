package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

const full = `pools:
- name: default
  addresses:
  - 198.51.100.0/25
  - 203.0.113.10-203.0.113.50
  - 2001:db8::/64
  autoAssign: false
  avoidBuggyIPs: true
  namespaces: [team-a, team-b]
  serviceSelector:
    matchLabels: {tier: public}
    matchExpressions:
    - {key: env, operator: In, values: [prod, staging]}
  nodeSelector:
    matchExpressions:
    - {key: node-role.kubernetes.io/edge, operator: Exists}
  interfaces: [eth0, bond0]
- name: other
  addresses: [198.51.100.128/25]
failover:
  probeInterval: 250ms
  failureThreshold: 5
  busyTimeout: 3s
  agentPort: 9000
  isolationShare: 0.75
  rebalance: false
announcements:
  refreshInterval: 2m30s
`

func TestParseFull(t *testing.T) {
	cfg, err := Parse("cloud.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	want := []poolSummary{
		{
			Name:            "default",
			Ranges:          "198.51.100.0/25 203.0.113.10-203.0.113.50 2001:db8::/64",
			AvoidBuggyIPs:   true,
			Namespaces:      []string{"team-a", "team-b"},
			ServiceSelector: "env in (prod,staging),tier=public",
			NodeSelector:    "node-role.kubernetes.io/edge",
			Interfaces:      []string{"eth0", "bond0"},
		},
		{Name: "other", Ranges: "198.51.100.128/25", AutoAssign: true},
	}
	if got := summarize(cfg.Pools); !reflect.DeepEqual(got, want) {
		t.Errorf("pools:\n got %+v\nwant %+v", got, want)
	}
	wantFailover := Failover{ProbeInterval: 250 * time.Millisecond, FailureThreshold: 5, BusyTimeout: 3 * time.Second, AgentPort: 9000, IsolationShare: 0.75, Rebalance: false}
	if cfg.Failover != wantFailover {
		t.Errorf("failover: got %+v, want %+v", cfg.Failover, wantFailover)
	}
	if want := (Announcements{RefreshInterval: 150 * time.Second, CheckInterval: DefaultCheckInterval}); cfg.Announcements != want {
		t.Errorf("announcements: got %+v, want %+v", cfg.Announcements, want)
	}
}

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse("cloud.yaml", []byte("pools:\n- name: default\n  addresses: [198.51.100.0/24]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []poolSummary{{Name: "default", Ranges: "198.51.100.0/24", AutoAssign: true}}
	if got := summarize(cfg.Pools); !reflect.DeepEqual(got, want) {
		t.Errorf("pools:\n got %+v\nwant %+v", got, want)
	}
	p := &cfg.Pools[0]
	if !p.ServiceSelector.Empty() || !p.NodeSelector.Empty() {
		t.Errorf("unset selectors must select everything, got %q and %q", p.ServiceSelector, p.NodeSelector)
	}
	wantFailover := Failover{ProbeInterval: 100 * time.Millisecond, FailureThreshold: 3, BusyTimeout: 2 * time.Second, AgentPort: 7474, IsolationShare: 0.5, Rebalance: true}
	if cfg.Failover != wantFailover {
		t.Errorf("failover: got %+v, want %+v", cfg.Failover, wantFailover)
	}
	if want := (Announcements{RefreshInterval: time.Minute, CheckInterval: DefaultCheckInterval}); cfg.Announcements != want {
		t.Errorf("announcements: got %+v, want %+v", cfg.Announcements, want)
	}
}

// TestParseRefreshInterval checks what announcements.refreshInterval takes: off, written
// either way, and durations within its bounds.
func TestParseRefreshInterval(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"off", 0},
		{"0", 0},
		{"0s", 0},
		{`"0"`, 0},
		{"1s", time.Second},
		{"90s", 90 * time.Second},
		{"5m", 5 * time.Minute},
		{"1h", time.Hour},
		{"", DefaultRefreshInterval}, // null: unset
	} {
		data := "pools:\n- {name: a, addresses: [198.51.100.0/24]}\nannouncements:\n  refreshInterval: " + tc.value + "\n"
		cfg, err := Parse("cloud.yaml", []byte(data))
		if err != nil {
			t.Errorf("refreshInterval: %s: %v", tc.value, err)
			continue
		}
		if got := cfg.Announcements.RefreshInterval; got != tc.want {
			t.Errorf("refreshInterval: %s = %v, want %v", tc.value, got, tc.want)
		}
	}

	// Each refused with its line, the field and the value as written.
	for value, shown := range map[string]string{
		"-5s":    `"-5s"`,
		"500ms":  `"500ms"`,
		"2h":     `"2h"`,
		"60":     `60`,
		"never":  `"never"`,
		"false":  `false`,
		"Off":    `"Off"`,
		"[1s]":   `a list`,
		"{s: 1}": `a mapping`,
	} {
		data := "pools:\n- {name: a, addresses: [198.51.100.0/24]}\nannouncements:\n  refreshInterval: " + value + "\n"
		_, err := Parse("cloud.yaml", []byte(data))
		want := problemList([]string{`cloud.yaml:4: announcements.refreshInterval: must be off (or 0), or a duration from 1s to 1h, such as "60s", not ` + shown})
		if got := errString(err); got != want {
			t.Errorf("refreshInterval: %s:\n got %s\nwant %s", value, got, want)
		}
	}
}

// TestParseMaintenance checks maintenance.drainOnCordon: off when the file leaves it out,
// true or false when written, and anything else refused with its line, as any boolean.
func TestParseMaintenance(t *testing.T) {
	const pools = "pools:\n- {name: a, addresses: [198.51.100.0/24]}\n"
	for _, tc := range []struct {
		data string
		want bool
	}{
		{pools, false},
		{pools + "maintenance:\n", false},
		{pools + "maintenance: {}\n", false},
		{pools + "maintenance:\n  drainOnCordon: ~\n", false},
		{pools + "maintenance:\n  drainOnCordon: false\n", false},
		{pools + "maintenance:\n  drainOnCordon: true\n", true},
	} {
		cfg, err := Parse("cloud.yaml", []byte(tc.data))
		if err != nil {
			t.Errorf("%q: %v", tc.data, err)
			continue
		}
		if got := cfg.Maintenance.DrainOnCordon; got != tc.want {
			t.Errorf("%q: drainOnCordon %v, want %v", tc.data, got, tc.want)
		}
	}
	for data, want := range map[string][]string{
		pools + "maintenance:\n  drainOnCordon: yes\n":  {`cloud.yaml:4: maintenance.drainOnCordon: must be true or false, not "yes"`},
		pools + "maintenance:\n  drainOnCordon: 1\n":    {`cloud.yaml:4: maintenance.drainOnCordon: must be true or false, not 1`},
		pools + "maintenance:\n  drainoncordon: true\n": {`cloud.yaml:4: maintenance: unknown field "drainoncordon"; did you mean "drainOnCordon"?`},
		pools + "maintenance:\n  cordon: true\n":        {`cloud.yaml:4: maintenance: unknown field "cordon"; the fields here are drainOnCordon`},
		pools + "maintenance: true\n":                   {`cloud.yaml:3: maintenance: must be a mapping, not true`},
	} {
		_, err := Parse("cloud.yaml", []byte(data))
		if got := errString(err); got != problemList(want) {
			t.Errorf("%q:\n got %s\nwant %s", data, got, problemList(want))
		}
	}
}

func TestParseNullMeansUnset(t *testing.T) {
	cfg, err := Parse("cloud.yaml", []byte(`pools:
- name: default
  addresses: [198.51.100.0/24]
  autoAssign:
  namespaces: ~
  serviceSelector: {}
  nodeSelector: null
failover:
announcements: {refreshInterval: ~}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []poolSummary{{Name: "default", Ranges: "198.51.100.0/24", AutoAssign: true}}
	if got := summarize(cfg.Pools); !reflect.DeepEqual(got, want) {
		t.Errorf("pools:\n got %+v\nwant %+v", got, want)
	}
	if cfg.Failover != defaultFailover {
		t.Errorf("failover: got %+v, want the defaults %+v", cfg.Failover, defaultFailover)
	}
	if cfg.Announcements != defaultAnnouncements {
		t.Errorf("announcements: got %+v, want the defaults %+v", cfg.Announcements, defaultAnnouncements)
	}
}

// The example shipped for operators must stay valid.
func TestExampleFile(t *testing.T) {
	cfg, err := Load("example-cloud-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Pools) != 2 || cfg.Pool("public") == nil || cfg.Failover != defaultFailover || cfg.Announcements != defaultAnnouncements {
		t.Errorf("the example no longer shows what it should: %+v", cfg)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Errorf("Load: %v", err)
	}

	if err := os.WriteFile(path, []byte("pools: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("cloud-config %[1]s has 1 problem:\n  %[1]s:1: pools: no pools; define at least one, with a name and addresses", path)
	if _, err := Load(path); err == nil || err.Error() != want {
		t.Errorf("Load of an invalid file:\n got %v\nwant %s", err, want)
	}

	missing := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := Load(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load of a missing file: got %v, want a not-exist error naming %s", err, missing)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // the problems, one a line, after the header
	}{
		{
			name: "syntax error",
			yaml: "pools:\n- name: a\n  addresses: [198.51.100.0/24\n",
			want: []string{`cloud.yaml:2: invalid YAML: did not find expected ',' or ']'`},
		},
		{
			name: "tab indentation",
			yaml: "pools:\n\t- name: a\n",
			want: []string{`cloud.yaml:2: invalid YAML: found character that cannot start any token`},
		},
		{
			name: "empty file",
			yaml: "",
			want: []string{`cloud.yaml: pools: no pools; define at least one, with a name and addresses`},
		},
		{
			name: "no pools",
			yaml: "failover: {}\n",
			want: []string{`cloud.yaml:1: pools: no pools; define at least one, with a name and addresses`},
		},
		{
			name: "empty pools",
			yaml: "failover: {}\npools: []\n",
			want: []string{`cloud.yaml:2: pools: no pools; define at least one, with a name and addresses`},
		},
		{
			name: "not a mapping",
			yaml: "- name: a\n",
			want: []string{`cloud.yaml:1: the cloud-config must be a mapping with the fields pools, failover, announcements and maintenance, not a list`},
		},
		{
			name: "two documents",
			yaml: "pools:\n- {name: a, addresses: [198.51.100.0/24]}\n---\npools: []\n",
			want: []string{`cloud.yaml:3: a second YAML document starts here; the cloud-config must be a single document`},
		},
		{
			name: "unknown fields everywhere",
			yaml: `pool: []
pools:
- name: a
  adresses: [198.51.100.0/24]
  addresses: [198.51.100.0/24]
  autoassign: true
  serviceSelector:
    matchLabel: {a: b}
    matchExpressions:
    - {key: a, operator: Exists, value: [x]}
failover:
  interval: 1s
`,
			want: []string{
				`cloud.yaml:1: unknown field "pool"; the fields here are pools, failover, announcements, maintenance`,
				`cloud.yaml:4: pools[0]: unknown field "adresses"; the fields here are name, addresses, autoAssign, avoidBuggyIPs, namespaces, serviceSelector, nodeSelector, interfaces`,
				`cloud.yaml:6: pools[0]: unknown field "autoassign"; did you mean "autoAssign"?`,
				`cloud.yaml:8: pools[0].serviceSelector: unknown field "matchLabel"; the fields here are matchLabels, matchExpressions`,
				`cloud.yaml:10: pools[0].serviceSelector.matchExpressions[0]: unknown field "value"; the fields here are key, operator, values`,
				`cloud.yaml:12: failover: unknown field "interval"; the fields here are probeInterval, failureThreshold, busyTimeout, agentPort, isolationShare, failback, rebalance`,
			},
		},
		{
			name: "repeated fields",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/24]
  name: b
  serviceSelector:
    matchLabels: {tier: a, tier: b}
`,
			want: []string{
				`cloud.yaml:4: pools[0]: field "name" is set twice (first at line 2); keep one`,
				`cloud.yaml:6: pools[0].serviceSelector.matchLabels: label "tier" is set twice (first at line 6); keep one`,
			},
		},
		{
			name: "wrong types",
			yaml: `pools:
- name: [a]
  addresses: 198.51.100.0/24
  autoAssign: "true"
  avoidBuggyIPs: yes
  namespaces: team-a
  interfaces: [{name: eth0}]
- 5
-
- name: b
  addresses: [[198.51.100.0/24]]
  serviceSelector: [tier=public]
  nodeSelector:
    matchLabels: [a]
    matchExpressions: {key: a}
failover: 1s
`,
			want: []string{
				`cloud.yaml:2: pools[0].name: must be a string, not a list`,
				`cloud.yaml:3: pools[0].addresses: must be a list, not "198.51.100.0/24"`,
				`cloud.yaml:4: pools[0].autoAssign: must be true or false, not "true"`,
				`cloud.yaml:5: pools[0].avoidBuggyIPs: must be true or false, not "yes"`,
				`cloud.yaml:6: pools[0].namespaces: must be a list, not "team-a"`,
				`cloud.yaml:7: pools[0].interfaces[0]: must be a string, not a mapping`,
				`cloud.yaml:8: pools[1]: must be a mapping, not 5`,
				`cloud.yaml:9: pools[2]: must be a mapping, not null`,
				`cloud.yaml:11: pools[3].addresses[0]: must be a string, not a list`,
				`cloud.yaml:12: pools[3].serviceSelector: must be a mapping, not a list`,
				`cloud.yaml:14: pools[3].nodeSelector.matchLabels: must be a mapping, not a list`,
				`cloud.yaml:15: pools[3].nodeSelector.matchExpressions: must be a list, not a mapping`,
				`cloud.yaml:16: failover: must be a mapping, not "1s"`,
			},
		},
		{
			name: "keys that are not strings",
			yaml: "pools:\n- name: a\n  addresses: [198.51.100.0/24]\n  ? [x]\n  : y\n",
			want: []string{`cloud.yaml:4: pools[0]: a field name must be a string, not a list`},
		},
		{
			name: "aliases",
			yaml: `pools:
- &base
  name: a
  addresses: [198.51.100.0/24]
- *base
- name: b
  addresses: [198.51.101.0/24]
  namespaces: &ns [team-a]
  interfaces: *ns
`,
			want: []string{
				`cloud.yaml:5: pools[1]: YAML aliases are not supported; write out the value of *base here`,
				`cloud.yaml:9: pools[2].interfaces: YAML aliases are not supported; write out the value of *ns here`,
			},
		},
		{
			name: "missing and invalid pool names",
			yaml: `pools:
- addresses: [198.51.100.0/24]
- name: ""
  addresses: [198.51.101.0/24]
- name: Default
  addresses: [198.51.102.0/24]
- name: a-very-long-name-that-goes-on-and-on-well-past-the-sixty-three-characters
  addresses: [198.51.103.0/24]
- name: -edge
  addresses: [198.51.104.0/24]
`,
			want: []string{
				`cloud.yaml:2: pools[0].name: missing; every pool needs a unique name, such as "default"`,
				`cloud.yaml:3: pools[1].name: empty; every pool needs a unique name, such as "default"`,
				`cloud.yaml:5: pools[2].name: invalid pool name "Default"; use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit`,
				`cloud.yaml:7: pools[3].name: invalid pool name "a-very-long-name-that-goes-on-and-on-well-past-the-sixty-three-characters"; use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit`,
				`cloud.yaml:9: pools[4].name: invalid pool name "-edge"; use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit`,
			},
		},
		{
			name: "duplicate pool names",
			yaml: `pools:
- name: default
  addresses: [198.51.100.0/24]
- name: other
  addresses: [198.51.101.0/24]
- name: default
  addresses: [198.51.102.0/24]
`,
			want: []string{`cloud.yaml:6: pools[2].name: pool name "default" is already used by pools[0] at line 2; pool names must be unique`},
		},
		{
			name: "no addresses",
			yaml: "pools:\n- name: a\n- name: b\n  addresses: []\n",
			want: []string{
				`cloud.yaml:2: pools[0].addresses: no addresses; list at least one CIDR (198.51.100.0/24) or range (198.51.100.10-198.51.100.50)`,
				`cloud.yaml:4: pools[1].addresses: no addresses; list at least one CIDR (198.51.100.0/24) or range (198.51.100.10-198.51.100.50)`,
			},
		},
		{
			name: "invalid addresses",
			yaml: `pools:
- name: a
  addresses:
  - 198.51.100.0/33
  - 198.51.100.1/24
  - 198.51.100.50-198.51.100.10
  - 198.51.100.1-2001:db8::1
  - 198.51.100.300-198.51.100.301
  - 2001:db8::1/64
  - 198.51.100.7
  - ""
`,
			want: []string{
				`cloud.yaml:4: pools[0].addresses[0]: invalid CIDR "198.51.100.0/33": netip.ParsePrefix("198.51.100.0/33"): prefix length out of range`,
				`cloud.yaml:5: pools[0].addresses[1]: invalid CIDR "198.51.100.1/24": host bits are set, did you mean 198.51.100.0/24?`,
				`cloud.yaml:6: pools[0].addresses[2]: invalid range 198.51.100.50-198.51.100.10: end comes before start`,
				`cloud.yaml:7: pools[0].addresses[3]: invalid range 198.51.100.1-2001:db8::1: mixes IPv4 and IPv6`,
				`cloud.yaml:8: pools[0].addresses[4]: invalid range start "198.51.100.300": ParseAddr("198.51.100.300"): IPv4 field has value >255`,
				`cloud.yaml:9: pools[0].addresses[5]: invalid CIDR "2001:db8::1/64": host bits are set, did you mean 2001:db8::/64?`,
				`cloud.yaml:10: pools[0].addresses[6]: "198.51.100.7" is neither a CIDR (198.51.100.0/24) nor a range (198.51.100.10-198.51.100.50)`,
				`cloud.yaml:11: pools[0].addresses[7]: "" is neither a CIDR (198.51.100.0/24) nor a range (198.51.100.10-198.51.100.50)`,
			},
		},
		{
			name: "overlaps within a pool",
			yaml: `pools:
- name: default
  addresses:
  - 198.51.100.0/24
  - 198.51.100.200-198.51.100.210
  - 198.51.100.0/24
`,
			want: []string{
				`cloud.yaml:5: pools[0].addresses[1] 198.51.100.200-198.51.100.210 (pool "default") overlaps pools[0].addresses[0] 198.51.100.0/24 (pool "default") at 198.51.100.200`,
				`cloud.yaml:6: pools[0].addresses[2] 198.51.100.0/24 (pool "default") overlaps pools[0].addresses[0] 198.51.100.0/24 (pool "default") at 198.51.100.0`,
			},
		},
		{
			name: "overlaps between pools",
			yaml: `pools:
- name: default
  addresses: [198.51.100.0/24, "2001:db8::/48"]
- name: public
  addresses:
  - 198.51.100.128/25
  - 2001:db8:0:ffff::/64
  - 2001:db8:1::/48
`,
			want: []string{
				`cloud.yaml:6: pools[1].addresses[0] 198.51.100.128/25 (pool "public") overlaps pools[0].addresses[0] 198.51.100.0/24 (pool "default") at 198.51.100.128`,
				`cloud.yaml:7: pools[1].addresses[1] 2001:db8:0:ffff::/64 (pool "public") overlaps pools[0].addresses[1] 2001:db8::/48 (pool "default") at 2001:db8:0:ffff::`,
			},
		},
		{
			// Sorted, the small ranges come after the big one, and the second overlaps it
			// though not its neighbour: comparing neighbours alone would miss it.
			name: "overlap with a range that is not a neighbour",
			yaml: `pools:
- name: small
  addresses: [198.51.100.10-198.51.100.20, 198.51.100.30-198.51.100.40]
- name: big
  addresses: [198.51.100.0/24]
`,
			want: []string{
				`cloud.yaml:5: pools[1].addresses[0] 198.51.100.0/24 (pool "big") overlaps pools[0].addresses[0] 198.51.100.10-198.51.100.20 (pool "small") at 198.51.100.10`,
				`cloud.yaml:5: pools[1].addresses[0] 198.51.100.0/24 (pool "big") overlaps pools[0].addresses[1] 198.51.100.30-198.51.100.40 (pool "small") at 198.51.100.30`,
			},
		},
		{
			name: "addresses no Service can have",
			yaml: `pools:
- addresses: [0.0.0.0/0, "::/0", 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4, 255.255.255.255/32]
  name: a
- name: b
  addresses:
  - fe80::/64
  - ff02::/16
  - ::1/128
  - ::fffe:ffff:ffff-::1:0:0:0
  - 198.51.100.0/24
`,
			want: []string{
				`cloud.yaml:2: pools[0].addresses[0]: 0.0.0.0/0 (pool "a"): 0.0.0.0 is the unspecified address (0.0.0.0/32), never a Service address`,
				`cloud.yaml:2: pools[0].addresses[1]: ::/0 (pool "a"): :: is the unspecified address (::/128), never a Service address`,
				`cloud.yaml:2: pools[0].addresses[2]: 127.0.0.0/8 (pool "a"): 127.0.0.0 is loopback (127.0.0.0/8), never a Service address`,
				`cloud.yaml:2: pools[0].addresses[3]: 169.254.0.0/16 (pool "a"): 169.254.0.0 is link-local (169.254.0.0/16), never a Service address`,
				`cloud.yaml:2: pools[0].addresses[4]: 224.0.0.0/4 (pool "a"): 224.0.0.0 is multicast (224.0.0.0/4), never a Service address`,
				`cloud.yaml:2: pools[0].addresses[5]: 255.255.255.255/32 (pool "a"): 255.255.255.255 is the broadcast address (255.255.255.255/32), never a Service address`,
				`cloud.yaml:6: pools[1].addresses[0]: fe80::/64 (pool "b"): fe80:: is link-local (fe80::/10), never a Service address`,
				`cloud.yaml:7: pools[1].addresses[1]: ff02::/16 (pool "b"): ff02:: is multicast (ff00::/8), never a Service address`,
				`cloud.yaml:8: pools[1].addresses[2]: ::1/128 (pool "b"): ::1 is loopback (::1/128), never a Service address`,
				`cloud.yaml:9: pools[1].addresses[3]: ::fffe:ffff:ffff-::1:0:0:0 (pool "b"): ::ffff:0.0.0.0 is IPv4-mapped IPv6 (::ffff:0.0.0.0/96), never a Service address`,
			},
		},
		{
			name: "ranges that only touch do not overlap, nor do families",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/25, 198.51.100.128-198.51.100.255, "2001:db8::/32", 198.51.101.0/24]
`,
		},
		{
			name: "namespaces",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/24]
  namespaces: [team-a, "", Team_B, null, 123]
`,
			want: []string{
				`cloud.yaml:4: pools[0].namespaces[1]: empty namespace name; remove the entry or name a namespace`,
				`cloud.yaml:4: pools[0].namespaces[2]: invalid namespace name "Team_B"; use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit`,
				`cloud.yaml:4: pools[0].namespaces[3]: must be a string, not null`,
			},
		},
		{
			name: "interfaces",
			yaml: "pools:\n- name: a\n  addresses: [198.51.100.0/24]\n  interfaces: [eth0, '']\n",
			want: []string{`cloud.yaml:4: pools[0].interfaces[1]: empty interface name; remove the entry or name an interface, such as "eth0"`},
		},
		{
			name: "bad selectors",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/24]
  serviceSelector:
    matchLabels:
      bad key: x
      tier: not ok!
      empty:
    matchExpressions:
    - {key: a, operator: Equals, values: [x]}
    - {key: a, operator: Exists, values: [x]}
    - {key: a, operator: In}
    - {operator: DoesNotExist}
    - {key: a, operator: In, values: [[x]]}
  nodeSelector:
    matchExpressions:
    - {key: a/b/c, operator: Exists}
    - {key: b}
`,
			want: []string{
				`cloud.yaml:6: pools[0].serviceSelector.matchLabels["bad key"]: key: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				`cloud.yaml:7: pools[0].serviceSelector.matchLabels["tier"]: values[0][tier]: Invalid value: "not ok!": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
				`cloud.yaml:10: pools[0].serviceSelector.matchExpressions[0]: "Equals" is not a valid label selector operator; use In, NotIn, Exists or DoesNotExist`,
				`cloud.yaml:11: pools[0].serviceSelector.matchExpressions[1]: values: Invalid value: ["x"]: values set must be empty for exists and does not exist`,
				`cloud.yaml:12: pools[0].serviceSelector.matchExpressions[2]: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty`,
				`cloud.yaml:13: pools[0].serviceSelector.matchExpressions[3]: key: Invalid value: "": name part must be non-empty; name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				`cloud.yaml:14: pools[0].serviceSelector.matchExpressions[4].values[0]: must be a string, not a list`,
				`cloud.yaml:17: pools[0].nodeSelector.matchExpressions[0]: key: Invalid value: "a/b/c": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`,
				`cloud.yaml:18: pools[0].nodeSelector.matchExpressions[1]: "" is not a valid label selector operator; use In, NotIn, Exists or DoesNotExist`,
			},
		},
		{
			name: "failover out of range",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/24]
failover:
  probeInterval: 5ms
  failureThreshold: 0
  agentPort: 65536
  isolationShare: 0
`,
			want: []string{
				`cloud.yaml:5: failover.probeInterval: must be a duration from 10ms to 10s, such as "100ms", not "5ms"`,
				`cloud.yaml:6: failover.failureThreshold: must be an integer from 1 to 100, not 0`,
				`cloud.yaml:7: failover.agentPort: must be an integer from 1 to 65535, not 65536`,
				`cloud.yaml:8: failover.isolationShare: must be a fraction above 0 and at most 1, such as 0.5, not 0`,
			},
		},
		{
			name: "failover of the wrong type",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/24]
failover:
  probeInterval: 100
  failureThreshold: three
  agentPort: "7474"
  isolationShare: half
  rebalance: "no"
`,
			want: []string{
				`cloud.yaml:5: failover.probeInterval: must be a duration from 10ms to 10s, such as "100ms", not 100`,
				`cloud.yaml:6: failover.failureThreshold: must be an integer from 1 to 100, not "three"`,
				`cloud.yaml:7: failover.agentPort: must be an integer from 1 to 65535, not "7474"`,
				`cloud.yaml:8: failover.isolationShare: must be a fraction above 0 and at most 1, such as 0.5, not "half"`,
				`cloud.yaml:9: failover.rebalance: must be true or false, not "no"`,
			},
		},
		{
			name: "failover beyond any integer",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/24]
failover:
  probeInterval: 1000000h
  failureThreshold: 99999999999999999999
  agentPort: -1
  isolationShare: 1.5
`,
			want: []string{
				`cloud.yaml:5: failover.probeInterval: must be a duration from 10ms to 10s, such as "100ms", not "1000000h"`,
				`cloud.yaml:6: failover.failureThreshold: must be an integer from 1 to 100, not 99999999999999999999`,
				`cloud.yaml:7: failover.agentPort: must be an integer from 1 to 65535, not -1`,
				`cloud.yaml:8: failover.isolationShare: must be a fraction above 0 and at most 1, such as 0.5, not 1.5`,
			},
		},
		{
			name: "announcements out of range or of the wrong type",
			yaml: `pools:
- name: a
  addresses: [198.51.100.0/24]
announcements:
  refreshInterval: -5s
  refreshinterval: 60s
  interval: 60s
`,
			want: []string{
				`cloud.yaml:5: announcements.refreshInterval: must be off (or 0), or a duration from 1s to 1h, such as "60s", not "-5s"`,
				`cloud.yaml:6: announcements: unknown field "refreshinterval"; did you mean "refreshInterval"?`,
				`cloud.yaml:7: announcements: unknown field "interval"; the fields here are refreshInterval, checkInterval`,
			},
		},
		{
			name: "a value with a newline stays on one line",
			yaml: "pools:\n- name: a\n  addresses: [\"fe80::1%a\\nb-fe80::2\"]\n",
			want: []string{`cloud.yaml:3: pools[0].addresses[0]: invalid range fe80::1%a\nb-fe80::2: fe80::1%a\nb has a zone: a Service address cannot`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("cloud.yaml", []byte(tc.yaml))
			if got, want := errString(err), problemList(tc.want); got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestParseReportsAllProblemsInLineOrder(t *testing.T) {
	_, err := Parse("cloud.yaml", []byte(`failover:
  agentPort: 0
pools:
- name: public
  addresses: [198.51.100.128/25]
  extra: 1
- name: default
  addresses: [198.51.100.0/24, 198.51.100.0/33]
- name: public
`))
	want := `cloud-config cloud.yaml has 6 problems:
  cloud.yaml:2: failover.agentPort: must be an integer from 1 to 65535, not 0
  cloud.yaml:6: pools[0]: unknown field "extra"; the fields here are name, addresses, autoAssign, avoidBuggyIPs, namespaces, serviceSelector, nodeSelector, interfaces
  cloud.yaml:8: pools[1].addresses[1]: invalid CIDR "198.51.100.0/33": netip.ParsePrefix("198.51.100.0/33"): prefix length out of range
  cloud.yaml:8: pools[1].addresses[0] 198.51.100.0/24 (pool "default") overlaps pools[0].addresses[0] 198.51.100.128/25 (pool "public") at 198.51.100.128
  cloud.yaml:9: pools[2].addresses: no addresses; list at least one CIDR (198.51.100.0/24) or range (198.51.100.10-198.51.100.50)
  cloud.yaml:9: pools[2].name: pool name "public" is already used by pools[0] at line 4; pool names must be unique`
	if got := errString(err); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	var merr *multierror.Error
	if !errors.As(err, &merr) || len(merr.Errors) != 6 {
		t.Errorf("got %T with %d errors, want a *multierror.Error with 6", err, len(merr.Errors))
	}
}

// Overlap detection must neither compare every pair nor count addresses: this would take
// hours otherwise.
func TestParseManyRanges(t *testing.T) {
	var b strings.Builder
	b.WriteString("pools:\n")
	for p := 0; p < 100; p++ {
		fmt.Fprintf(&b, "- name: p%d\n  addresses:\n", p)
		for i := 0; i < 200; i++ {
			fmt.Fprintf(&b, "  - 10.%d.%d.0/24\n  - 2001:db8:%x:%x::/64\n", p, i, p, i)
		}
	}
	b.WriteString("- name: big\n  addresses: [\"2001:db8::/32\"]\n")
	_, err := Parse("cloud.yaml", []byte(b.String()))
	var merr *multierror.Error
	if !errors.As(err, &merr) || len(merr.Errors) != 100*200 {
		t.Fatalf("got %d problems, want one for each of the 20000 IPv6 ranges inside 2001:db8::/32", len(merr.Errors))
	}
}

// Every range that shares an address with another must be named in some report, however
// the ranges nest.
func TestOverlapsMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	overlapReport := regexp.MustCompile(`(pools\[\d+\]\.addresses\[\d+\]) \S+ \(pool "p\d+"\) overlaps (pools\[\d+\]\.addresses\[\d+\]) `)
	for range 500 {
		var b strings.Builder
		b.WriteString("pools:\n")
		type written struct {
			path string
			r    iprange.Range
		}
		var all []written
		for p := range 1 + rng.IntN(3) {
			fmt.Fprintf(&b, "- name: p%d\n  addresses:\n", p)
			for i := range 1 + rng.IntN(4) {
				first := rng.IntN(64)
				last := first + rng.IntN(16)
				s := fmt.Sprintf("10.0.0.%d-10.0.0.%d", first, last)
				fmt.Fprintf(&b, "  - %s\n", s)
				all = append(all, written{fmt.Sprintf("pools[%d].addresses[%d]", p, i), mustParseRange(t, s)})
			}
		}
		want := make(map[string]bool)
		for i, x := range all {
			for j, y := range all {
				if i != j && x.r.Overlaps(y.r) {
					want[x.path] = true
				}
			}
		}
		got := make(map[string]bool)
		if _, err := Parse("cloud.yaml", []byte(b.String())); err != nil {
			for _, m := range overlapReport.FindAllStringSubmatch(err.Error(), -1) {
				got[m[1]], got[m[2]] = true, true
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ranges named in reports: %v, want %v, for:\n%s", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)), b.String())
		}
	}
}

func TestPoolMethods(t *testing.T) {
	cfg, err := Parse("cloud.yaml", []byte(`pools:
- name: default
  addresses: [198.51.100.0/24, "2001:db8::/64"]
- name: restricted
  addresses: [203.0.113.10-203.0.113.20]
  namespaces: [team-a]
  serviceSelector:
    matchLabels: {tier: public}
- name: buggy
  addresses: [192.0.2.255/32, 192.0.2.0/32, "2001:db8:1::1-2001:db8:1::2"]
  avoidBuggyIPs: true
- name: edge
  addresses: [192.0.4.255-192.0.5.0]
  avoidBuggyIPs: true
`))
	if err != nil {
		t.Fatal(err)
	}
	def, restricted, buggy, edge := cfg.Pool("default"), cfg.Pool("restricted"), cfg.Pool("buggy"), cfg.Pool("edge")
	if def == nil || restricted == nil || buggy == nil || edge == nil || cfg.Pool("nope") != nil {
		t.Fatalf("Pool finds the wrong pools: %v %v %v %v %v", def, restricted, buggy, edge, cfg.Pool("nope"))
	}

	for _, tc := range []struct {
		pool      *Pool
		namespace string
		labels    labels.Set
		want      bool
	}{
		{def, "anything", nil, true},
		{restricted, "team-a", labels.Set{"tier": "public", "x": "y"}, true},
		{restricted, "team-b", labels.Set{"tier": "public"}, false},
		{restricted, "team-a", labels.Set{"tier": "private"}, false},
		{restricted, "team-a", nil, false},
		{&Pool{}, "anything", nil, true}, // built by hand, without selectors
	} {
		if got := tc.pool.AllowsService(tc.namespace, tc.labels); got != tc.want {
			t.Errorf("pool %q AllowsService(%q, %v) = %v, want %v", tc.pool.Name, tc.namespace, tc.labels, got, tc.want)
		}
	}

	for _, tc := range []struct {
		addr string
		want *Pool
	}{
		{"198.51.100.0", def},
		{"198.51.100.255", def},
		{"2001:db8::ffff", def},
		{"203.0.113.10", restricted},
		{"203.0.113.20", restricted},
		{"203.0.113.21", nil},
		{"192.0.2.0", buggy}, // kept from allocation, but still the pool's
		{"192.0.5.0", edge},
		{"198.51.101.0", nil},
		{"2001:db8:1::3", nil},
	} {
		a := netip.MustParseAddr(tc.addr)
		if got := cfg.PoolFor(a); got != tc.want {
			t.Errorf("PoolFor(%s) = %v, want %v", a, name(got), name(tc.want))
		}
		if tc.want != nil && !tc.want.Contains(a) {
			t.Errorf("pool %q does not contain %s", tc.want.Name, a)
		}
	}

	for _, tc := range []struct {
		pool       *Pool
		ipv4, ipv6 bool
	}{
		{def, true, true},
		{restricted, true, false},
		{buggy, false, true}, // its only IPv4 addresses end in .0 and .255
		{edge, false, false},
	} {
		if got := tc.pool.HasFamily(iprange.IPv4); got != tc.ipv4 {
			t.Errorf("pool %q HasFamily(IPv4) = %v, want %v", tc.pool.Name, got, tc.ipv4)
		}
		if got := tc.pool.HasFamily(iprange.IPv6); got != tc.ipv6 {
			t.Errorf("pool %q HasFamily(IPv6) = %v, want %v", tc.pool.Name, got, tc.ipv6)
		}
	}
}

// With avoidBuggyIPs, a short IPv4 range may be made of .0 and .255 addresses alone.
func TestHasFamilyAvoidingBuggyIPs(t *testing.T) {
	for _, tc := range []struct {
		r    string
		want bool
	}{
		{"192.0.2.0/32", false},
		{"192.0.2.255/32", false},
		{"192.0.2.255-192.0.3.0", false},
		{"192.0.2.255-192.0.3.1", true},
		{"192.0.2.254-192.0.3.0", true},
		{"192.0.2.0/31", true},
		{"192.0.2.1/32", true},
		{"0.0.0.0/0", true},
	} {
		p := &Pool{Ranges: []iprange.Range{mustParseRange(t, tc.r)}, AvoidBuggyIPs: true}
		if got := p.HasFamily(iprange.IPv4); got != tc.want {
			t.Errorf("HasFamily(IPv4) of %s avoiding buggy IPs = %v, want %v", tc.r, got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("example-cloud-config.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(example),
		full,
		"",
		"pools: []\n",
		"pools:\n- name: a\n  addresses: [198.51.100.0/24, 198.51.100.128/25]\n",
		"pools:\n- name: a\n  addresses: [\"2001:db8::/48\", \"2001:db8::1-2001:db8::5\"]\n",
		"pools:\n- &a {name: a, addresses: [10.0.0.0/8]}\n- *a\n",
		"pools:\n- {name: a, name: b, ? [x] : y}\n",
		"pools: [\n",
		"failover: {probeInterval: 1x, failureThreshold: 0x10, agentPort: 1_000}\n",
		"announcements: {refreshInterval: off}\n",
		"maintenance: {drainOnCordon: true}\n",
		"pools:\n- name: a\n  addresses: [1.2.3.4-1.2.3.4]\n  serviceSelector: {matchExpressions: [{key: a, operator: In, values: [b]}]}\n---\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			var merr *multierror.Error
			if !errors.As(err, &merr) || len(merr.Errors) == 0 {
				t.Fatalf("got %T %v, want a *multierror.Error with problems", err, err)
			}
			if lines := strings.Count(err.Error(), "\n"); lines != len(merr.Errors) {
				t.Fatalf("%d problems printed on %d lines:\n%s", len(merr.Errors), lines, err)
			}
			return
		}
		if len(cfg.Pools) == 0 {
			t.Fatal("a valid config without pools")
		}
		var all []iprange.Range
		for i, p := range cfg.Pools {
			if p.Name == "" || len(p.Ranges) == 0 || p.ServiceSelector == nil || p.NodeSelector == nil {
				t.Fatalf("pools[%d] is incomplete: %+v", i, p)
			}
			for _, r := range p.Ranges {
				if got := cfg.PoolFor(r.First); got != &cfg.Pools[i] {
					t.Fatalf("PoolFor(%s) = %v, want pools[%d]", r.First, name(got), i)
				}
				all = append(all, r)
			}
		}
		for i, r := range all {
			for _, o := range all[i+1:] {
				if r.Overlaps(o) {
					t.Fatalf("a valid config with %s overlapping %s", r, o)
				}
			}
		}
	})
}

// poolSummary is a Pool in a form reflect.DeepEqual can compare: selectors are interfaces
// over unexported types.
type poolSummary struct {
	Name                          string
	Ranges                        string
	AutoAssign, AvoidBuggyIPs     bool
	Namespaces                    []string
	ServiceSelector, NodeSelector string
	Interfaces                    []string
}

func summarize(pools []Pool) []poolSummary {
	var s []poolSummary
	for _, p := range pools {
		var ranges []string
		for _, r := range p.Ranges {
			ranges = append(ranges, r.String())
		}
		s = append(s, poolSummary{
			Name:            p.Name,
			Ranges:          strings.Join(ranges, " "),
			AutoAssign:      p.AutoAssign,
			AvoidBuggyIPs:   p.AvoidBuggyIPs,
			Namespaces:      p.Namespaces,
			ServiceSelector: p.ServiceSelector.String(),
			NodeSelector:    p.NodeSelector.String(),
			Interfaces:      p.Interfaces,
		})
	}
	return s
}

func problemList(problems []string) string {
	if len(problems) == 0 {
		return "<nil>"
	}
	noun := "problems"
	if len(problems) == 1 {
		noun = "problem"
	}
	return fmt.Sprintf("cloud-config cloud.yaml has %d %s:\n  %s", len(problems), noun, strings.Join(problems, "\n  "))
}

func mustParseRange(t *testing.T, s string) iprange.Range {
	t.Helper()
	r, err := iprange.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func name(p *Pool) string {
	if p == nil {
		return "no pool"
	}
	return fmt.Sprintf("pool %q", p.Name)
}

// TestParseCheckInterval checks announcements.checkInterval: on by default, off, and
// refused out of its bounds with the field named.
func TestParseCheckInterval(t *testing.T) {
	for value, want := range map[string]time.Duration{"": DefaultCheckInterval, "off": 0, "0": 0, "1s": time.Second, "45s": 45 * time.Second} {
		data := "pools:\n- {name: a, addresses: [198.51.100.0/24]}\nannouncements:\n  checkInterval: " + value + "\n"
		cfg, err := Parse("cloud.yaml", []byte(data))
		if err != nil {
			t.Errorf("checkInterval: %s: %v", value, err)
			continue
		}
		if got := cfg.Announcements.CheckInterval; got != want {
			t.Errorf("checkInterval: %s = %v, want %v", value, got, want)
		}
	}
	_, err := Parse("cloud.yaml", []byte("pools:\n- {name: a, addresses: [198.51.100.0/24]}\nannouncements:\n  checkInterval: 100ms\n"))
	if err == nil || !strings.Contains(err.Error(), `cloud.yaml:4: announcements.checkInterval: must be off (or 0), or a duration from 1s to 1h, such as "20s", not "100ms"`) {
		t.Errorf("checkInterval: 100ms: %v, want it refused with its line and bounds", err)
	}
}
