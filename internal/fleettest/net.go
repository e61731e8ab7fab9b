package fleettest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// network is the fleet's plumbing: a bridge in the root namespace at
// 10.87.N.1/24 and, per host, a network namespace joined to it by a veth
// pair, the host at 10.87.N.(10+i). N is the first /24 of 10.87.0.0/16
// that no interface of the machine uses, so fleets of parallel test
// packages do not meet.
type network struct {
	tag    string // names this fleet's links and namespaces
	subnet int    // N
	bridge string
}

// lockFile serialises the choice of subnet and the bridge's creation
// between the kits of parallel test processes.
const lockFile = "/run/agentbox-fleettest.lock"

func newNetwork(ctx context.Context) (_ *network, err error) {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	n := &network{tag: hex.EncodeToString(b)}
	n.bridge = "abf" + n.tag + "br"
	unlock, err := flock(lockFile)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out, err := run(ctx, "ip", "-4", "-o", "addr", "show")
	if err != nil {
		return nil, err
	}
	n.subnet = -1
	for s := range 256 {
		if !strings.Contains(out, fmt.Sprintf(" 10.87.%d.", s)) {
			n.subnet = s
			break
		}
	}
	if n.subnet < 0 {
		return nil, fmt.Errorf("fleettest: every /24 of 10.87.0.0/16 is in use")
	}
	defer func() {
		if err != nil {
			n.remove(context.Background(), 0)
		}
	}()
	for _, args := range [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.gatewayIP() + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if _, err := run(ctx, "ip", args...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// gatewayIP is the bridge's address: the root namespace as the hosts see
// it (PostgreSQL listens there).
func (n *network) gatewayIP() string { return fmt.Sprintf("10.87.%d.1", n.subnet) }

// CIDR is the fleet's subnet.
func (n *network) cidr() string { return fmt.Sprintf("10.87.%d.0/24", n.subnet) }

// hostIP is host i's address.
func (n *network) hostIP(i int) string { return fmt.Sprintf("10.87.%d.%d", n.subnet, 10+i) }

// netns is host i's namespace name (under /run/netns).
func (n *network) netns(i int) string { return fmt.Sprintf("abfleet-%s-h%d", n.tag, i) }

// veth is the root side of host i's veth pair.
func (n *network) veth(i int) string { return fmt.Sprintf("abf%sh%d", n.tag, i) }

// addHost makes host i's namespace, with loopback up and eth0 on the
// bridge at hostIP(i), its default route the bridge.
func (n *network) addHost(ctx context.Context, i int) error {
	ns, veth := n.netns(i), n.veth(i)
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", veth, "type", "veth", "peer", "name", veth + "p"},
		{"link", "set", veth + "p", "netns", ns},
		{"link", "set", veth, "master", n.bridge},
		{"link", "set", veth, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "set", veth + "p", "name", "eth0"},
		{"-n", ns, "addr", "add", n.hostIP(i) + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", n.gatewayIP()},
	}
	for _, args := range steps {
		if _, err := run(ctx, "ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the hosts' namespaces (their veths go with them) and the
// bridge; it reports what it could not remove.
func (n *network) remove(ctx context.Context, hosts int) error {
	var errs []string
	for i := range hosts {
		if _, err := os.Stat("/run/netns/" + n.netns(i)); err == nil {
			if _, err := run(ctx, "ip", "netns", "del", n.netns(i)); err != nil {
				errs = append(errs, err.Error())
			}
		}
		_, _ = run(ctx, "ip", "link", "del", n.veth(i)) // gone with its namespace, normally
	}
	if _, err := run(ctx, "ip", "link", "del", n.bridge); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("fleettest: network left: %s", strings.Join(errs, "; "))
	}
	return nil
}

// run runs a command and returns its output, or an error with it.
func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("fleettest: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return out.String(), nil
}

// flock takes an exclusive lock of path (made if missing).
func flock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fleettest: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("fleettest: lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
