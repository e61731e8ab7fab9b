// Package nettest runs test upstreams in a network namespace that the test
// creates: a veth pair joins it to the host (10.250.K.1 on the host side,
// 10.250.K.2 inside), the upstream HTTP and HTTPS servers listen inside with
// their own test CA, and sink listeners own the addresses that must never be
// reached (the metadata IP, a public documentation address), with /32 host
// routes that send those addresses into the namespace. A leak can only land
// there, never off the machine; SinkHits counts what arrived.
package nettest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/hostd/netns"
)

// Names the upstream's certificate is valid for.
var Names = []string{"allowed.test", "inject.test", "denied.test", "other.test", "api.allowed.test", "git.test"}

// Addresses that must never be reached; the namespace owns them.
var (
	MetadataIP = netip.MustParseAddr("169.254.169.254")
	PublicIP   = netip.MustParseAddr("203.0.113.7")
)

// TB is the part of testing.TB that New uses (the benchmarks supply their
// own).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

var _ TB = (testing.TB)(nil)

// Request is what the upstream saw of one request.
type Request struct {
	Host   string
	Path   string
	Header http.Header
}

// Upstream is a test upstream in its own namespace.
type Upstream struct {
	NS     string
	HostIP netip.Addr // the host end of the veth
	IP     netip.Addr // the upstream's address
	CA     *TestCA    // the upstream's certificate chains to it
	// HTTPPort and HTTPSPort are the upstream's ports on IP.
	HTTPPort, HTTPSPort int

	sinks    []netip.Addr
	mu       sync.Mutex
	requests []Request
	routes   map[string]http.Handler
	sinkHits atomic.Int64
}

// New creates the namespace, the veth pair, the routes and the servers; all
// of it is removed when the test ends.
func New(t TB) *Upstream { return newUpstream(t, true) }

// NewWithoutSinks is New without the sink addresses and their host routes
// (for benchmarks, which probe nothing that must be blocked, and may run
// beside the tests).
func NewWithoutSinks(t TB) *Upstream { return newUpstream(t, false) }

func newUpstream(t TB, sinks bool) *Upstream {
	t.Helper()
	suffix := randHex(3)
	k := byte(1 + randByte()%250)
	u := &Upstream{
		NS: "abtest-" + suffix, HTTPPort: 80, HTTPSPort: 443,
		HostIP: netip.AddrFrom4([4]byte{10, 250, k, 1}), IP: netip.AddrFrom4([4]byte{10, 250, k, 2}),
	}
	ca, err := NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	u.CA = ca
	if sinks {
		u.sinks = []netip.Addr{MetadataIP, PublicIP}
	}
	hostIf, nsIf := "abth"+suffix, "abtn"+suffix
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostIf); err == nil {
			_ = netlink.LinkDel(l) // takes the peer with it
		}
		if err := netns.Remove(u.NS); err != nil {
			t.Errorf("remove %s: %v", u.NS, err)
		}
	})
	if err := netns.InNew(u.NS, func() error { return nsSetup(sinks) }); err != nil {
		t.Fatal(err)
	}
	if err := u.link(hostIf, nsIf); err != nil {
		t.Fatal(err)
	}
	if len(u.sinks) > 0 {
		lockSinks(t)
	}
	for _, sink := range u.sinks {
		r := &netlink.Route{Dst: prefix32(sink), Gw: u.IP.AsSlice()}
		if err := netlink.RouteAdd(r); err != nil {
			t.Fatalf("route %s into the test namespace: %v", sink, err)
		}
		t.Cleanup(func() { _ = netlink.RouteDel(r) })
	}
	u.serve(t)
	return u
}

// sinkLock is the host-wide lock file held while the sink addresses are
// routed into a test namespace: the routes are the host's, so test binaries
// of other packages (or of other checkouts) running at the same time wait
// for their turn instead of failing on an existing route.
const sinkLock = "/run/agentbox-nettest-sinks.lock"

// lockSinks takes sinkLock until the test ends, waiting up to ten minutes.
func lockSinks(t TB) {
	t.Helper()
	f, err := os.OpenFile(sinkLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("open %s: %v", sinkLock, err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("lock %s (another test routes the sink addresses): %v", sinkLock, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Cleanups run last-in first-out: registered before the routes, this
	// one runs after they are removed.
	t.Cleanup(func() { f.Close() })
}

// nsSetup runs inside the new namespace: loopback up, owning the sinks.
func nsSetup(sinks bool) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	if !sinks {
		return nil
	}
	for _, a := range []netip.Addr{MetadataIP, PublicIP} {
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: prefix32(a)}); err != nil {
			return err
		}
	}
	return nil
}

func prefix32(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}
}

// link makes the veth pair and addresses both ends.
func (u *Upstream) link(hostIf, nsIf string) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: nsIf}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	peer, err := netlink.LinkByName(nsIf)
	if err != nil {
		return err
	}
	nsFd, err := nsFD(u.NS)
	if err != nil {
		return err
	}
	defer nsFd.Close()
	if err := netlink.LinkSetNsFd(peer, int(nsFd.Fd())); err != nil {
		return fmt.Errorf("move veth: %w", err)
	}
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: &net.IPNet{IP: u.HostIP.AsSlice(), Mask: net.CIDRMask(30, 32)}}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return err
	}
	return netns.Do(u.NS, func() error {
		l, err := netlink.LinkByName(nsIf)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: u.IP.AsSlice(), Mask: net.CIDRMask(30, 32)}}); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
}

// serve opens the listeners inside the namespace and serves them.
func (u *Upstream) serve(t TB) {
	var httpL, httpsL net.Listener
	var sinks []net.Listener
	err := netns.Do(u.NS, func() error {
		var err error
		if httpL, err = net.Listen("tcp4", net.JoinHostPort(u.IP.String(), strconv.Itoa(u.HTTPPort))); err != nil {
			return err
		}
		if httpsL, err = net.Listen("tcp4", net.JoinHostPort(u.IP.String(), strconv.Itoa(u.HTTPSPort))); err != nil {
			return err
		}
		for _, a := range u.sinks {
			for _, port := range []string{"80", "443"} {
				l, err := net.Listen("tcp4", net.JoinHostPort(a.String(), port))
				if err != nil {
					return err
				}
				sinks = append(sinks, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(u.handle)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	tlsSrv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: u.CA.ServerConfig(append(Names, u.IP.String()))}
	go func() { _ = srv.Serve(httpL) }()
	go func() { _ = tlsSrv.ServeTLS(httpsL, "", "") }()
	for _, l := range sinks {
		go u.sink(l)
	}
	t.Cleanup(func() {
		_ = srv.Close()
		_ = tlsSrv.Close()
		for _, l := range sinks {
			_ = l.Close()
		}
	})
}

func (u *Upstream) sink(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		u.sinkHits.Add(1)
		_ = c.Close()
	}
}

// handle answers every request: /bytes?n=N sends N bytes, anything else a
// short text. It never echoes request headers back (so a secret it receives
// does not travel into the guest).
func (u *Upstream) handle(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.requests = append(u.requests, Request{Host: r.Host, Path: r.URL.Path, Header: r.Header.Clone()})
	h := u.routes[r.Host]
	u.mu.Unlock()
	if h != nil {
		h.ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/bytes" {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		buf := make([]byte, 64<<10)
		for n > 0 {
			k := min(n, len(buf))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
		return
	}
	fmt.Fprintf(w, "hello from upstream %s\n", r.Host)
}

// Route serves the requests for host (one of Names) with h instead.
func (u *Upstream) Route(host string, h http.Handler) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.routes == nil {
		u.routes = map[string]http.Handler{}
	}
	u.routes[host] = h
}

// Requests returns what the upstream has seen so far.
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.requests...)
}

// SinkHits counts connections that reached an address that must never be
// reached.
func (u *Upstream) SinkHits() int64 { return u.sinkHits.Load() }

// Hosts is the proxy's name map for the upstream's names.
func (u *Upstream) Hosts() map[string]string {
	m := map[string]string{}
	for _, n := range Names {
		m[n] = u.IP.String()
	}
	return m
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randByte() byte {
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	return b[0]
}
