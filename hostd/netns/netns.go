// Package netns gives each sandbox its own network namespace, holding only a
// tap device for the guest and the egress proxy's listening sockets. The
// namespace has no veth, no bridge and no route to anywhere: the guest's
// packets can reach only those sockets (nftables in the namespace redirects
// every guest TCP connection to the proxy's transparent listener, UDP port 53
// to its DNS listener, and drops or rejects everything else).
//
// Namespaces are bind-mounted under /run/netns as
// agentbox-<installation>-<sandbox id>, so a hostd that was killed can find
// and remove exactly its own orphans on the next start (Sweep).
package netns

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Fixed addressing. Every namespace is separate, so every sandbox uses the
// same /30: the host side (the proxy) is HostIP, the guest is GuestIP.
var (
	HostIP    = netip.MustParseAddr("10.0.0.1")
	GuestIP   = netip.MustParseAddr("10.0.0.2")
	PrefixLen = 30
)

// Ports of the proxy's listeners inside the namespace.
const (
	// ProxyPort receives every TCP connection of the guest (nftables
	// redirects them); the original destination is read with SO_ORIGINAL_DST.
	ProxyPort = 15001
	// DNSPort receives the guest's DNS queries (UDP and TCP), whatever
	// address they were sent to.
	DNSPort = 53
)

// GuestMAC is every guest NIC's address. Each namespace is its own link, so
// all guests can share it, and a snapshot's clones (whose device state
// carries the MAC) need no change.
const GuestMAC = "52:54:00:ab:00:02"

// HostMAC is every tap's own address (the guest's gateway), fixed for the
// same reason.
const HostMAC = "52:54:00:ab:00:01"

// TapName is the tap device's name inside each namespace.
const TapName = "abtap0"

// bindDir is where named namespaces are bind-mounted (vishvananda/netns).
const bindDir = "/run/netns"

// namePrefix starts every namespace name of ours.
const namePrefix = "agentbox-"

// Installation tells one hostd's namespaces from another's on the same
// machine (two data directories, or tests running in parallel).
type Installation string

// InstallationOf derives the installation tag from hostd's data directory.
func InstallationOf(dataDir string) Installation {
	sum := sha256.Sum256([]byte(dataDir))
	return Installation(hex.EncodeToString(sum[:4]))
}

// Name is the namespace name of sandbox id.
func (inst Installation) Name(id string) string {
	return namePrefix + string(inst) + "-" + id
}

// Sandbox is one sandbox's namespace and what was opened inside it. The
// sockets stay in the namespace they were created in.
type Sandbox struct {
	ID   string
	Name string
	// Tap is the tap device's queue, to hand to the VMM. The device is not
	// persistent: it disappears when the last holder of Tap closes it.
	Tap *os.File
	// MAC is the guest NIC's address.
	MAC string
	// Proxy receives every guest TCP connection (transparently redirected).
	Proxy *net.TCPListener
	// DNSUDP and DNSTCP serve the guest's DNS queries.
	DNSUDP *net.UDPConn
	DNSTCP *net.TCPListener
}

// Create makes sandbox id's namespace, its tap, its nftables table and the
// proxy's sockets. On error nothing is left behind.
func (inst Installation) Create(id string) (_ *Sandbox, err error) {
	name := inst.Name(id)
	s := &Sandbox{ID: id, Name: name, MAC: GuestMAC}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if err := os.MkdirAll(bindDir, 0o755); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	if err := inNewNamed(name, s.setup); err != nil {
		return nil, fmt.Errorf("netns: create %s: %w", name, err)
	}
	if err := applyRules(name); err != nil {
		return nil, fmt.Errorf("netns: nftables in %s: %w", name, err)
	}
	return s, nil
}

// Reopen opens the proxy's sockets again in sandbox id's existing
// namespace: after a hostd restart, the namespace, its tap (held by the
// running VMM) and its nftables table are still there, but the listeners
// died with the old hostd. The returned Sandbox has no Tap; Close closes
// the sockets and removes the namespace, as for one made by Create.
func (inst Installation) Reopen(id string) (_ *Sandbox, err error) {
	name := inst.Name(id)
	if !Exists(name) {
		return nil, fmt.Errorf("netns: reopen %s: %w", name, os.ErrNotExist)
	}
	s := &Sandbox{ID: id, Name: name, MAC: GuestMAC}
	if err := Do(name, s.listen); err != nil {
		return nil, errors.Join(fmt.Errorf("netns: reopen %s: %w", name, err), s.CloseSockets())
	}
	return s, nil
}

// setup runs on a thread inside the new namespace: tap, address, sockets.
func (s *Sandbox) setup() error {
	tap := &netlink.Tuntap{
		LinkAttrs:  netlink.LinkAttrs{Name: TapName},
		Mode:       netlink.TUNTAP_MODE_TAP,
		Flags:      netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE,
		Queues:     1,
		NonPersist: true,
	}
	if err := netlink.LinkAdd(tap); err != nil {
		return fmt.Errorf("tap: %w", err)
	}
	s.Tap = tap.Fds[0]
	// A fixed host-side MAC too: a restored guest's ARP cache still holds
	// the one it knew, and must find it in the new namespace.
	hw, _ := net.ParseMAC(HostMAC)
	if err := netlink.LinkSetHardwareAddr(tap, hw); err != nil {
		return fmt.Errorf("tap address: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: HostIP.AsSlice(), Mask: net.CIDRMask(PrefixLen, 32)}}
	if err := netlink.AddrAdd(tap, addr); err != nil {
		return fmt.Errorf("tap address: %w", err)
	}
	if err := netlink.LinkSetUp(tap); err != nil {
		return fmt.Errorf("tap up: %w", err)
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	return s.listen()
}

// listen opens the proxy's sockets; it runs inside the namespace.
func (s *Sandbox) listen() error {
	var err error
	host := HostIP.AsSlice()
	if s.Proxy, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: host, Port: ProxyPort}); err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	if s.DNSTCP, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: host, Port: DNSPort}); err != nil {
		return fmt.Errorf("dns tcp listener: %w", err)
	}
	if s.DNSUDP, err = net.ListenUDP("udp4", &net.UDPAddr{IP: host, Port: DNSPort}); err != nil {
		return fmt.Errorf("dns udp listener: %w", err)
	}
	return nil
}

// CloseSockets closes the proxy's sockets (the proxy stops serving this
// namespace).
func (s *Sandbox) CloseSockets() error {
	var errs []error
	if s.Proxy != nil {
		errs = append(errs, s.Proxy.Close())
	}
	if s.DNSTCP != nil {
		errs = append(errs, s.DNSTCP.Close())
	}
	if s.DNSUDP != nil {
		errs = append(errs, s.DNSUDP.Close())
	}
	return ignoreClosed(errors.Join(errs...))
}

// Close closes the sockets and the tap and removes the namespace. The
// kernel frees it once the VMM has closed its copy of the tap too.
func (s *Sandbox) Close() error {
	errs := []error{s.CloseSockets()}
	if s.Tap != nil {
		errs = append(errs, ignoreClosed(s.Tap.Close()))
	}
	errs = append(errs, Remove(s.Name))
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// Remove deletes the named namespace; a missing one is not an error.
func Remove(name string) error {
	path := Path(name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns: unmount %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns: remove %s: %w", name, err)
	}
	return nil
}

// List returns the ids of this installation's namespaces.
func (inst Installation) List() ([]string, error) {
	ents, err := os.ReadDir(bindDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	prefix := inst.Name("")
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), prefix); ok && id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Sweep removes every namespace of this installation whose sandbox keep does
// not claim. It returns the ids it removed and, by id, the namespaces it
// could not remove (one still mounted elsewhere is busy: EBUSY); err is a
// listing that failed.
func (inst Installation) Sweep(keep func(id string) bool) (removed []string, failed map[string]error, err error) {
	ids, err := inst.List()
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		if keep != nil && keep(id) {
			continue
		}
		if err := Remove(inst.Name(id)); err != nil {
			if failed == nil {
				failed = map[string]error{}
			}
			failed[id] = err
			continue
		}
		removed = append(removed, id)
	}
	return removed, failed, nil
}

// Path is where the named namespace is bind-mounted.
func Path(name string) string { return bindDir + "/" + name }

// Exists reports whether a namespace of that name is bind-mounted.
func Exists(name string) bool {
	_, err := os.Stat(Path(name))
	return err == nil
}

// inNewNamed creates a named namespace and runs fn on a locked OS thread
// inside it (see onThread).
func inNewNamed(name string, fn func() error) error {
	return onThread(func(orig vnetns.NsHandle) error {
		ns, err := vnetns.NewNamed(name)
		if err != nil {
			// NewNamed may have switched the thread already.
			return errors.Join(err, vnetns.Set(orig))
		}
		return ns.Close()
	}, fn)
}

// Do runs fn on a locked OS thread inside the named namespace (tests use it
// to dial from inside; see onThread).
func Do(name string, fn func() error) error {
	return onThread(func(vnetns.NsHandle) error {
		ns, err := vnetns.GetFromName(name)
		if err != nil {
			return err
		}
		defer ns.Close()
		return vnetns.Set(ns)
	}, fn)
}

// onThread runs enter and then fn on a locked OS thread, and puts the
// thread back into its original namespace (given to enter) afterwards. If
// enter fails, fn does not run. If the thread cannot be put back, it stays
// locked, so the runtime ends it with its goroutine and no other goroutine
// runs in the wrong namespace.
func onThread(enter func(orig vnetns.NsHandle) error, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		var ferr error
		if ferr = enter(orig); ferr == nil {
			ferr = fn()
		}
		if err := vnetns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("restore netns: %w", err))
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// InNew creates a named namespace (with nothing in it but loopback) and runs
// fn on a locked thread inside it. Tests build their upstream namespaces
// with it; the namespace stays until Remove.
func InNew(name string, fn func() error) error {
	if err := os.MkdirAll(bindDir, 0o755); err != nil {
		return err
	}
	return inNewNamed(name, fn)
}
