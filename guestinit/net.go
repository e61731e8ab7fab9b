package guestinit

import (
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
)

// Kernel cmdline keys of the guest's network, set by hostd when the sandbox
// has a NIC:
//
//	agentbox.ip=10.0.0.2/30   the NIC's address
//	agentbox.gw=10.0.0.1      the only route (default, via the proxy's side)
//	agentbox.dns=10.0.0.1     written to /etc/resolv.conf
//	agentbox.ca=<base64url>   the egress proxy's CA certificate (DER)
const (
	argIP  = "agentbox.ip"
	argGW  = "agentbox.gw"
	argDNS = "agentbox.dns"
	argCA  = "agentbox.ca"
)

// Trust store paths of the Debian root filesystem.
const (
	caBundle = "/etc/ssl/certs/ca-certificates.crt"
	caLocal  = "/usr/local/share/ca-certificates/agentbox-egress.crt"
)

// errNoNIC: the cmdline asks for a network but no NIC exists.
var errNoNIC = errors.New("no network interface")

// setupNetwork configures the guest's NIC from the cmdline. Without
// agentbox.ip the sandbox has no network and nothing is done.
func setupNetwork(args map[string]string) error {
	if args[argCA] != "" {
		if err := installCA(args[argCA]); err != nil {
			return fmt.Errorf("install egress CA: %w", err)
		}
	}
	if args[argIP] == "" {
		return nil
	}
	addr, err := netlink.ParseAddr(args[argIP])
	if err != nil {
		return fmt.Errorf("%s: %w", argIP, err)
	}
	link, err := firstNIC(2 * time.Second)
	if err != nil {
		// The VMM gave no NIC (a backend without tap support): the guest
		// simply has no network, which is the safe way to fail.
		return fmt.Errorf("%w: %w", errNoNIC, err)
	}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("link up: %w", err)
	}
	if gw := net.ParseIP(args[argGW]); gw != nil {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw}); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	if dns := args[argDNS]; dns != "" {
		conf := "nameserver " + dns + "\noptions timeout:2 attempts:2\n"
		if err := os.WriteFile("/etc/resolv.conf", []byte(conf), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// firstNIC waits for the first non-loopback link (the virtio-net device).
func firstNIC(wait time.Duration) (netlink.Link, error) {
	deadline := time.Now().Add(wait)
	for {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, err
		}
		for _, l := range links {
			if l.Attrs().Flags&net.FlagLoopback == 0 && l.Type() == "device" {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("no network interface appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// installCA adds the proxy's CA to the guest's trust store: the PEM file
// that update-ca-certificates would keep, and the bundle that OpenSSL, curl,
// git and Python's ssl read.
func installCA(b64 string) error {
	der, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return err
	}
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.MkdirAll(filepath.Dir(caLocal), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(caLocal, block, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(caBundle), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(caBundle, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(block)
	return errors.Join(werr, f.Close())
}
