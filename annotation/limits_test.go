package annotation

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestListLimits checks that a list over its number of entries, and any value over its
// bytes, is refused whole with an error naming the key, the limit and the size, and that
// a list at its limit is read.
func TestListLimits(t *testing.T) {
	list := func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("name-%d", i)
		}
		return strings.Join(names, ", ") + ",,"
	}
	for _, key := range []string{PreferredNodes, Standbys, SharedIPNamespaces} {
		for _, tc := range []struct {
			value string
			want  string // "" for no error
		}{
			{list(MaxListItems), ""},
			{list(MaxListItems + 1), fmt.Sprintf("%d entries, more than the limit of %d", MaxListItems+1, MaxListItems)},
			{strings.Repeat("a,", 2000), fmt.Sprintf("2000 entries, more than the limit of %d", MaxListItems)},
			{strings.Repeat("a", MaxValueBytes+1), fmt.Sprintf("%d bytes, more than the limit of %d", MaxValueBytes+1, MaxValueBytes)},
		} {
			svc := shared("team-a", "web", "")
			svc.Annotations[Announcer] = "node-a"
			svc.Annotations[key] = tc.value
			r, err := Parse(svc)
			var fe *FieldError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s with %d bytes: %v", key, len(tc.value), err)
			case tc.want != "" && (!errors.As(err, &fe) || fe.Field != key || fe.Reason != tc.want):
				t.Errorf("%s with %d bytes: error %v, want a FieldError of %s: %s", key, len(tc.value), err, key, tc.want)
			case tc.want != "" && (len(r.PreferredNodes)+len(r.Standbys) > 0 || len(r.SharingNamespaces) != 1):
				t.Errorf("%s over its limit: request %+v, want none of the list used", key, r)
			}
		}
	}
	svc := service("web", v1.IPFamilyPolicyRequireDualStack, v1.IPv4Protocol, v1.IPv6Protocol)
	svc.Annotations[IPs] = "198.51.100.7,2001:db8::7,198.51.100.8"
	if _, err := Parse(svc); err == nil || !strings.Contains(err.Error(), "3 entries, more than the limit of 2") {
		t.Errorf("three addresses: %v", err)
	}
}

// TestLimitsAreInSpecs checks that every annotation has a limit of bytes, and every list
// one of entries.
func TestLimitsAreInSpecs(t *testing.T) {
	for _, s := range Specs {
		if s.MaxBytes <= 0 || strings.HasPrefix(s.Type, "comma-separated") != (s.MaxItems > 0) {
			t.Errorf("%s: MaxBytes %d, MaxItems %d for a %s", s.Key, s.MaxBytes, s.MaxItems, s.Type)
		}
	}
}

// TestBadAnnouncer checks that an announcer that is not one node's name is reported and
// never used: agents would answer for the addresses on its word.
func TestBadAnnouncer(t *testing.T) {
	for _, value := range []string{"Node_A", "node-a,node-b", "node a", strings.Repeat("a", 254), strings.Repeat("a", MaxValueBytes+1)} {
		svc := service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
		svc.Annotations[Announcer] = value
		svc.Annotations[Standbys] = "node-b"
		r, err := Parse(svc)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != Announcer {
			t.Errorf("announcer of %d bytes %.20q: error %v, want a FieldError of %s", len(value), value, err, Announcer)
		}
		if r.Announcer != "" || r.Plan() != nil {
			t.Errorf("announcer of %d bytes %.20q: used, plan %q", len(value), value, r.Plan())
		}
	}
}

// TestFieldErrorClipsValue checks that an error quotes the start of a huge value and its
// length, never the whole, and never cuts a character in two.
func TestFieldErrorClipsValue(t *testing.T) {
	value := strings.Repeat("é", 1<<19)
	got := (&FieldError{Field: PreferredNodes, Value: value, Reason: "too long"}).Error()
	want := fmt.Sprintf("%s=%q: too long", PreferredNodes, strings.Repeat("é", maxQuoted/2)+"…(1048576 bytes)")
	if got != want {
		t.Errorf("Error() = %.200q\nwant %q", got, want)
	}
	if got := (&FieldError{Field: Pool, Value: "public", Reason: "x"}).Error(); got != `lb.baremetal.io/pool="public": x` {
		t.Errorf("short value: %q", got)
	}
	svc := service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
	svc.Annotations[PreferredNodes] = strings.Repeat("a", 200_000)
	if _, err := Parse(svc); err == nil || len(err.Error()) > 200 {
		t.Errorf("error of a 200,000-byte value is %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
}
