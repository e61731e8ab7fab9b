package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ErrForbiddenAddress is returned when a name resolves to an address the
// proxy never connects to (loopback, link-local, private ranges, the host's
// own addresses) unless a policy or the operator's map says so.
var ErrForbiddenAddress = errors.New("egress: forbidden upstream address")

// resolver turns upstream names into addresses: the operator's static map
// first (trusted: split DNS, test upstreams), the host's resolver otherwise
// (only public addresses are used).
type resolver struct {
	static map[string]netip.Addr
	net    *net.Resolver
	dialer net.Dialer
}

func newResolver(hosts map[string]string) (*resolver, error) {
	r := &resolver{static: map[string]netip.Addr{}, net: net.DefaultResolver, dialer: net.Dialer{Timeout: 10 * time.Second}}
	for name, addr := range hosts {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return nil, fmt.Errorf("egress: hosts: %s=%s: %w", name, addr, err)
		}
		r.static[strings.ToLower(name)] = a
	}
	return r, nil
}

// lookup resolves host to the addresses the proxy may dial.
func (r *resolver) lookup(ctx context.Context, host string, pol *compiled) ([]netip.Addr, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a, ok := r.static[host]; ok {
		return []netip.Addr{a}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if _, ok := pol.cidrRule(a); ok && !neverDial(a) {
			return []netip.Addr{a}, nil
		}
		return nil, fmt.Errorf("%w: %s is not in allow_cidrs", ErrForbiddenAddress, a)
	}
	addrs, err := r.net.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	var ok []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if _, allowed := pol.cidrRule(a); (allowed && !neverDial(a)) || publicAddr(a) {
			ok = append(ok, a)
		}
	}
	if len(ok) == 0 {
		return nil, fmt.Errorf("%w: %s resolves to %v", ErrForbiddenAddress, host, addrs)
	}
	return ok, nil
}

// dial connects to host:port through lookup.
func (r *resolver) dial(ctx context.Context, host string, port int, pol *compiled) (net.Conn, error) {
	addrs, err := r.lookup(ctx, host, pol)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := r.dialer.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(port)))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// neverDial reports whether a is an address the proxy refuses whatever the
// policy says: the host itself (loopback, its own addresses), link-local
// (169.254.169.254), unspecified and multicast. An allow_cidrs of 0.0.0.0/0
// means "the internet", not "the host and its metadata service".
func neverDial(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified() ||
		a.IsMulticast() || netip.MustParsePrefix("0.0.0.0/8").Contains(a) || hostAddr(a)
}

// publicAddr reports whether a is a global unicast address outside the
// private, shared, documentation and local ranges and not one of the host's.
func publicAddr(a netip.Addr) bool {
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return !hostAddr(a)
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
}

// hostAddr reports whether a is assigned to one of the host's interfaces.
func hostAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // fail closed
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}
