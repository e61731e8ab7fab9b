package egress

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

func TestPublicAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"169.254.169.254", false}, {"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false},
		{"192.168.1.1", false}, {"100.64.0.1", false}, {"0.0.0.0", false}, {"::1", false}, {"fd00::1", false},
		{"fe80::1", false}, {"224.0.0.1", false}, {"8.8.8.8", true}, {"2606:4700::1111", true},
	} {
		if got := publicAddr(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("publicAddr(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// A name that the host's resolver maps to loopback (localhost, from
// /etc/hosts: no query leaves the machine) is refused; an address literal is
// allowed only inside allow_cidrs.
func TestLookupRefusesInternal(t *testing.T) {
	r, err := newResolver(map[string]string{"up.test": "10.250.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := compile(Policy{Mode: ModeProxy, AllowCIDRs: []string{"10.9.0.0/16"}})
	ctx := context.Background()
	if _, err := r.lookup(ctx, "localhost", pol); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("localhost: %v, want ErrForbiddenAddress", err)
	}
	if _, err := r.lookup(ctx, "169.254.169.254", pol); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("metadata literal: %v", err)
	}
	if a, err := r.lookup(ctx, "10.9.1.1", pol); err != nil || a[0].String() != "10.9.1.1" {
		t.Errorf("literal in allow_cidrs: %v, %v", a, err)
	}
	all, _ := compile(Policy{Mode: ModeProxy, AllowCIDRs: []string{"0.0.0.0/0"}})
	for _, host := range []string{"127.0.0.1", "169.254.169.254", "0.0.0.0"} {
		if _, err := r.lookup(ctx, host, all); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s with allow_cidrs 0.0.0.0/0: %v, want ErrForbiddenAddress", host, err)
		}
	}
	if _, err := r.lookup(ctx, "localhost", all); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("localhost with allow_cidrs 0.0.0.0/0: %v", err)
	}
	if a, err := r.lookup(ctx, "UP.test.", pol); err != nil || a[0].String() != "10.250.0.2" {
		t.Errorf("static map: %v, %v", a, err)
	}
}
