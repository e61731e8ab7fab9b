//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/nettest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// netDataDirs are the data dirs of every hostd the network tests started;
// TestMain checks that none left a namespace behind.
var (
	netDataDirsMu sync.Mutex
	netDataDirs   []string
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("AGENTBOX_TEST_CHILD_HOSTD"); dir != "" {
		childHostd(dir) // never returns
	}
	code := m.Run()
	if code == 0 {
		if err := leakCheck(); err != nil {
			fmt.Fprintln(os.Stderr, "leak check:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakCheck: no namespace of ours, no tap in the host namespace, no
// nftables table of ours in the host namespace.
func leakCheck() error {
	netDataDirsMu.Lock()
	defer netDataDirsMu.Unlock()
	for _, d := range netDataDirs {
		ids, err := netns.InstallationOf(d).List()
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			return fmt.Errorf("namespaces left for %s: %v", d, ids)
		}
	}
	if _, err := netlink.LinkByName(netns.TapName); err == nil {
		return fmt.Errorf("a %s link exists in the host namespace", netns.TapName)
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	tables, err := c.ListTables()
	if err != nil {
		return err
	}
	for _, t := range tables {
		if t.Name == netns.TableName {
			return fmt.Errorf("nftables table %s in the host namespace", t.Name)
		}
	}
	return nil
}

// startNetHostd runs hostd with networking and the upstream's names and CA.
func startNetHostd(t *testing.T, up *nettest.Upstream) (*client.Client, string) {
	c, data, _ := startNetHostdPort(t, up)
	return c, data
}

// startNetHostdOn starts hostd on an existing data dir.
func startNetHostdOn(t *testing.T, data string) (*client.Client, string) {
	c, _, _ := startNetHostdDir(t, nil, data)
	return c, data
}

// startNetHostdPort is startNetHostd that also returns the API's port.
func startNetHostdPort(t *testing.T, up *nettest.Upstream) (*client.Client, string, string) {
	t.Helper()
	data := vmmtest.ShortTempDir(t)
	netDataDirsMu.Lock()
	netDataDirs = append(netDataDirs, data)
	netDataDirsMu.Unlock()
	return startNetHostdDir(t, up, data)
}

func startNetHostdDir(t *testing.T, up *nettest.Upstream, data string) (*client.Client, string, string) {
	t.Helper()
	var caFile string
	if up != nil {
		caFile = filepath.Join(data, "upstream-ca.pem")
		if err := os.WriteFile(caFile, up.CA.PEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u, stop := runHostd(t, data, func(cfg *hostd.Config) {
		if up != nil {
			cfg.EgressHosts, cfg.EgressUpstreamCA = up.Hosts(), caFile
		}
	})
	t.Cleanup(stop)
	c, err := client.New(u, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return c, data, u[strings.LastIndex(u, ":")+1:]
}

// curl runs curl in the guest and returns its stdout and exit code; the
// last line of stdout is the HTTP status (000 when there was none).
func curl(t *testing.T, c *client.Client, id string, args ...string) (body string, status string, exit int) {
	t.Helper()
	argv := append([]string{"curl", "-sS", "-m", "20", "-w", "\n%{http_code}"}, args...)
	r := mustExec(t, c, id, argv...)
	out := strings.TrimRight(r.Stdout, "\n")
	i := strings.LastIndex(out, "\n")
	if i < 0 {
		return "", out, r.ExitCode
	}
	return out[:i], out[i+1:], r.ExitCode
}

func TestNetworkEgress(t *testing.T) {
	up := nettest.New(t)
	c, data, apiPort := startNetHostdPort(t, up)
	ctx := context.Background()
	secretBytes := make([]byte, 18)
	_, _ = rand.Read(secretBytes)
	secret := "ghs_" + hex.EncodeToString(secretBytes)
	if _, err := c.CreateSecret(ctx, "gh", secret); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "gh" {
		t.Fatalf("ListSecrets = %+v, %v", list, err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512,
		Network: &client.NetworkPolicyInput{
			AllowDomains: []string{"allowed.test"},
			Inject:       []client.InjectRule{{Host: "inject.test", Header: "Authorization", Value: "Bearer {{secret:gh}}"}},
		},
		SecretEnv: map[string]string{"GH_TOKEN": "gh"},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	nsName := netns.InstallationOf(data).Name(sb.ID)
	if !netns.Exists(nsName) {
		t.Fatalf("namespace %s missing", nsName)
	}
	if err := c.WriteFile(ctx, sb.ID, "/root/upstream-ca.pem", 0o644, bytes.NewReader(up.CA.PEM)); err != nil {
		t.Fatal(err)
	}

	t.Run("allowed https is spliced by SNI", func(t *testing.T) {
		// The guest verifies the upstream's own certificate: not intercepted.
		body, status, _ := curl(t, c, sb.ID, "--cacert", "/root/upstream-ca.pem", "https://allowed.test/")
		if status != "200" || !strings.Contains(body, "hello from upstream allowed.test") {
			t.Fatalf("got %s %q", status, body)
		}
	})
	t.Run("allowed http", func(t *testing.T) {
		body, status, _ := curl(t, c, sb.ID, "http://allowed.test/plain")
		if status != "200" || !strings.Contains(body, "hello from upstream allowed.test") {
			t.Fatalf("got %s %q", status, body)
		}
	})
	t.Run("denied host", func(t *testing.T) { checkDenied(t, c, sb.ID) })
	t.Run("no path around the proxy", func(t *testing.T) { checkNoBypass(t, c, sb.ID, up, apiPort) })
	t.Run("header injected", func(t *testing.T) { checkInjection(t, c, sb.ID, up, secret) })
	t.Run("policy patch takes effect", func(t *testing.T) { checkPatch(t, c, sb.ID, up) })
	t.Run("audit events", func(t *testing.T) { checkEvents(t, c, sb.ID) })
	t.Run("secret nowhere in the guest", func(t *testing.T) { checkSecretAbsent(t, c, sb.ID, data, secret) })
	t.Run("fork and pause keep the network", func(t *testing.T) { checkForkPause(t, c, sb.ID, data) })
	if up.SinkHits() != 0 {
		t.Errorf("%d connections reached a sink address", up.SinkHits())
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if netns.Exists(nsName) {
		t.Errorf("namespace %s left after delete", nsName)
	}
}

func checkDenied(t *testing.T, c *client.Client, id string) {
	// DNS does not answer a name outside the allowlist.
	_, _, exit := curl(t, c, id, "http://denied.test/")
	if exit != 6 {
		t.Errorf("curl of an unresolvable denied name: exit %d, want 6 (could not resolve)", exit)
	}
	// Reaching the proxy anyway (a hard-coded address) gets a 403 with the reason.
	body, status, _ := curl(t, c, id, "--resolve", "denied.test:80:10.0.0.1", "http://denied.test/")
	if status != "403" || !strings.Contains(body, "denied") {
		t.Errorf("http to a denied host: got %s %q, want 403 with a reason", status, body)
	}
	body, status, _ = curl(t, c, id, "--resolve", "denied.test:443:10.0.0.1", "https://denied.test/")
	if status != "403" || !strings.Contains(body, "denied") {
		t.Errorf("https to a denied host: got %s %q, want 403 with a reason", status, body)
	}
	// A port outside allow_ports is refused (reset), with no HTTP answer.
	_, status, exit = curl(t, c, id, "http://allowed.test:8080/")
	if exit == 0 || status != "000" {
		t.Errorf("port 8080: got exit %d status %s, want a refused connection", exit, status)
	}
	// UDP other than DNS is rejected.
	r := mustExec(t, c, id, "python3", "-c", `import socket
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(5); s.connect(("10.0.0.1",9999)); s.send(b"x")
try:
    s.recv(10); print("answered")
except ConnectionRefusedError: print("refused")
except socket.timeout: print("timeout")`)
	if strings.TrimSpace(r.Stdout) != "refused" {
		t.Errorf("udp to 10.0.0.1:9999: %q %q, want refused", r.Stdout, r.Stderr)
	}
}

func checkNoBypass(t *testing.T, c *client.Client, id string, up *nettest.Upstream, apiPort string) {
	before := len(up.Requests())
	for _, target := range []string{
		"http://" + up.IP.String() + "/", // the upstream by address
		"http://" + nettest.MetadataIP.String() + "/latest/meta-data/",
		"http://" + nettest.PublicIP.String() + "/", // a public address
		"http://" + up.HostIP.String() + "/",        // the host's end of the test veth
	} {
		body, status, _ := curl(t, c, id, target)
		if status != "403" {
			t.Errorf("%s: got %s %q, want 403", target, status, body)
		}
	}
	// hostd's API port, on the proxy's address or on the host's addresses:
	// not an allowed port, so refused before any byte is read.
	for _, target := range []string{"http://10.0.0.1:" + apiPort + "/healthz", "http://127.0.0.1:" + apiPort + "/healthz",
		"http://" + up.HostIP.String() + ":" + apiPort + "/healthz"} {
		if _, status, exit := curl(t, c, id, target); exit == 0 || status != "000" {
			t.Errorf("%s: exit %d status %s, want refused", target, exit, status)
		}
	}
	// TLS to an address, without a name: refused.
	_, status, exit := curl(t, c, id, "-k", "https://"+up.IP.String()+"/")
	if exit == 0 || status != "000" {
		t.Errorf("https by address: exit %d status %s, want refused", exit, status)
	}
	// The guest has exactly one route besides its /30.
	r := mustExec(t, c, id, "ip", "-4", "route")
	if got := strings.TrimSpace(r.Stdout); !strings.HasPrefix(got, "default via 10.0.0.1") || strings.Count(got, "\n") != 1 {
		t.Errorf("guest routes: %q", got)
	}
	if got := len(up.Requests()); got != before {
		t.Errorf("upstream saw %d requests from bypass attempts, want 0", got-before)
	}
	if up.SinkHits() != 0 {
		t.Errorf("sinks were reached %d times", up.SinkHits())
	}
}

func checkInjection(t *testing.T, c *client.Client, id string, up *nettest.Upstream, secret string) {
	// Through a shell, so that $GH_TOKEN (the placeholder) is expanded.
	r := mustExec(t, c, id, "sh", "-c", `curl -sS -m 20 -w '\n%{http_code}' -H "X-Token: $GH_TOKEN" https://inject.test/api`)
	body, status := splitStatus(r.Stdout)
	if status != "200" || !strings.Contains(body, "hello from upstream inject.test") {
		t.Fatalf("inject.test: got %s %q (stderr %q)", status, body, r.Stderr)
	}
	var got *nettest.Request
	for _, req := range up.Requests() {
		if req.Host == "inject.test" && req.Path == "/api" {
			got = &req
		}
	}
	if got == nil {
		t.Fatal("the upstream saw no request for inject.test")
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+secret {
		t.Errorf("Authorization at the upstream: %q", a)
	}
	if x := got.Header.Get("X-Token"); x != secret {
		t.Errorf("placeholder not swapped for inject.test: X-Token %q", x)
	}
	// A host without a rule gets the placeholder, never the secret.
	r = mustExec(t, c, id, "sh", "-c", `curl -sS -m 20 -o /dev/null -H "X-Token: $GH_TOKEN" http://allowed.test/placeholder`)
	for _, req := range up.Requests() {
		if req.Path == "/placeholder" {
			if x := req.Header.Get("X-Token"); x == secret || !strings.HasPrefix(x, "agentbox-placeholder-gh-") {
				t.Errorf("allowed.test got X-Token %q, want the placeholder", x)
			}
			if req.Header.Get("Authorization") != "" {
				t.Errorf("allowed.test got an Authorization header")
			}
		}
	}
}

func splitStatus(out string) (body, status string) {
	out = strings.TrimRight(out, "\n")
	i := strings.LastIndex(out, "\n")
	if i < 0 {
		return "", out
	}
	return out[:i], out[i+1:]
}

func checkPatch(t *testing.T, c *client.Client, id string, up *nettest.Upstream) {
	ctx := context.Background()
	domains := []string{"allowed.test", "*.test"}
	p, err := c.PatchNetwork(ctx, id, client.NetworkPolicyPatch{AllowDomains: &domains})
	if err != nil || len(p.AllowDomains) != 2 || len(p.Inject) != 1 {
		t.Fatalf("patch: %+v, %v", p, err)
	}
	body, status, _ := curl(t, c, id, "http://denied.test/now")
	if status != "200" || !strings.Contains(body, "hello from upstream denied.test") {
		t.Errorf("after allowing *.test: got %s %q", status, body)
	}
	domains = []string{}
	if _, err := c.PatchNetwork(ctx, id, client.NetworkPolicyPatch{AllowDomains: &domains}); err != nil {
		t.Fatal(err)
	}
	body, status, _ = curl(t, c, id, "--resolve", "allowed.test:80:10.0.0.1", "http://allowed.test/")
	if status != "403" {
		t.Errorf("after removing allowed.test: got %s %q, want 403", status, body)
	}
	bad := []int{0}
	if _, err := c.PatchNetwork(ctx, id, client.NetworkPolicyPatch{AllowPorts: &bad}); err == nil {
		t.Error("a bad port was accepted")
	}
	// allow_cidrs: a direct connection by address is spliced as TCP.
	cidrs := []string{up.IP.String() + "/32"}
	if _, err := c.PatchNetwork(ctx, id, client.NetworkPolicyPatch{AllowCidrs: &cidrs}); err != nil {
		t.Fatal(err)
	}
	body, status, _ = curl(t, c, id, "http://"+up.IP.String()+"/by-address")
	if status != "200" || !strings.Contains(body, "hello from upstream "+up.IP.String()) {
		t.Errorf("address in allow_cidrs: got %s %q", status, body)
	}
	// Even "everything" does not include the host and the metadata service.
	cidrs = []string{"0.0.0.0/0"}
	if _, err := c.PatchNetwork(ctx, id, client.NetworkPolicyPatch{AllowCidrs: &cidrs}); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"http://" + nettest.MetadataIP.String() + "/", "http://" + up.HostIP.String() + "/"} {
		if body, status, _ := curl(t, c, id, target); status != "403" {
			t.Errorf("%s with allow_cidrs 0.0.0.0/0: got %s %q, want 403", target, status, body)
		}
	}
	if up.SinkHits() != 0 {
		t.Errorf("the metadata sink was reached with allow_cidrs 0.0.0.0/0")
	}
	cidrs = []string{}
	if _, err := c.PatchNetwork(ctx, id, client.NetworkPolicyPatch{AllowCidrs: &cidrs}); err != nil {
		t.Fatal(err)
	}
	if _, status, _ = curl(t, c, id, "http://"+up.IP.String()+"/by-address-again"); status != "403" {
		t.Errorf("address after allow_cidrs was cleared: got %s, want 403", status)
	}
}

func checkEvents(t *testing.T, c *client.Client, id string) {
	evs, err := c.NetworkEvents(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var allowedGet, deniedHTTP, spliced, injected, deniedDNS, byCIDR bool
	for _, ev := range evs {
		e := ev.Network
		if e == nil {
			t.Fatalf("a network event without its details: %+v", ev)
		}
		method, path := deref(e.Method), deref(e.Path)
		switch {
		case e.Kind == "http" && e.Host == "allowed.test" && method == "GET" && path == "/plain" && e.Allowed && e.Rule == "domain:allowed.test" && e.BytesIn > 0:
			allowedGet = true
		case e.Kind == "http" && e.Host == "denied.test" && !e.Allowed && e.Status == 403:
			deniedHTTP = true
		case e.Kind == "tls" && e.Host == "allowed.test" && e.Allowed && e.BytesIn > 0 && e.BytesOut > 0:
			spliced = true
		case e.Kind == "https" && e.Host == "inject.test" && path == "/api" && e.Allowed && e.Rule == "inject:inject.test":
			injected = true
		case e.Kind == "dns" && e.Host == "denied.test" && !e.Allowed:
			deniedDNS = true
		case e.Kind == "tcp" && e.Allowed && strings.HasPrefix(e.Rule, "cidr:") && e.BytesIn > 0:
			byCIDR = true
		}
	}
	if !allowedGet || !deniedHTTP || !spliced || !injected || !deniedDNS || !byCIDR {
		t.Errorf("events: allowed GET %v, denied http %v, spliced tls %v, injected https %v, denied dns %v, cidr tcp %v; got %d events",
			allowedGet, deniedHTTP, spliced, injected, deniedDNS, byCIDR, len(evs))
		for _, e := range evs {
			t.Logf("%+v", *e.Network)
		}
	}
	if after := evs[len(evs)-1].ID; after > 0 {
		more, err := c.NetworkEvents(context.Background(), id, after, 0)
		if err != nil || len(more) != 0 {
			t.Errorf("events after the last: %d, %v", len(more), err)
		}
	}
}

// checkSecretAbsent searches the guest's env, its disk (the overlay) and its
// memory (the VMM's memfd) for the secret, plain and base64.
func checkSecretAbsent(t *testing.T, c *client.Client, id, data, secret string) {
	forms := [][]byte{[]byte(secret), []byte(base64.StdEncoding.EncodeToString([]byte(secret))),
		[]byte(base64.StdEncoding.EncodeToString([]byte("Bearer " + secret)))}
	r := mustExec(t, c, id, "sh", "-c", "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")
	if strings.Contains(r.Stdout, secret) {
		t.Error("the secret is in the guest's environment")
	}
	if !strings.Contains(r.Stdout, "GH_TOKEN=agentbox-placeholder-gh-") {
		t.Errorf("GH_TOKEN placeholder missing from the env")
	}
	mustExec(t, c, id, "sync")
	disks, _ := filepath.Glob(filepath.Join(data, "sandboxes", id, "*.qcow2"))
	if len(disks) == 0 {
		t.Fatal("no overlay found")
	}
	var overlay []byte
	for _, d := range disks {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		overlay = append(overlay, b...)
	}
	for _, f := range forms {
		if bytes.Contains(overlay, f) {
			t.Errorf("the secret (%q) is on the guest's disk", f)
		}
	}
	sb, err := c.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	mem := guestMemory(t, sb.VMPID)
	for _, f := range forms {
		if bytes.Contains(mem, f) {
			t.Errorf("the secret (%q) is in the guest's memory", f)
		}
	}
	// Nor is the CA's private key.
	keyPEM, err := os.ReadFile(filepath.Join(data, "egress-ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	keyBlock, _ := pem.Decode(keyPEM)
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]byte{keyBlock.Bytes, keyPEM[30:90], key.D.Bytes()} {
		if bytes.Contains(mem, f) || bytes.Contains(overlay, f) {
			t.Error("the egress CA's private key is in the guest")
		}
	}
	// The search itself works: the placeholder the guest does hold is found.
	if !bytes.Contains(mem, []byte("agentbox-placeholder-gh-")) {
		t.Error("the memory dump does not hold the placeholder token: is it the guest's memory?")
	}
}

// guestMemory reads the guest's RAM from the QEMU process's memfd backend.
func guestMemory(t *testing.T, pid int) []byte {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		link, _ := os.Readlink(filepath.Join(dir, e.Name()))
		if !strings.HasPrefix(link, "/memfd:agentbox-") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("no memfd in %s", dir)
	return nil
}

func TestNetworkNone(t *testing.T) {
	c, data := startNetHostd(t, nil)
	ctx := context.Background()
	none := client.NetworkMode("none")
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 256, Network: &client.NetworkPolicyInput{Mode: &none}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	r := mustExec(t, c, sb.ID, "ls", "/sys/class/net")
	if got := strings.Fields(r.Stdout); len(got) != 1 || got[0] != "lo" {
		t.Errorf("interfaces: %v, want only lo", got)
	}
	if netns.Exists(netns.InstallationOf(data).Name(sb.ID)) {
		t.Error("a namespace exists for a sandbox without network")
	}
	p, err := c.NetworkPolicy(ctx, sb.ID)
	if err != nil || p.Mode != "none" {
		t.Errorf("policy: %+v, %v", p, err)
	}
}

// TestNetworkOrphansRemovedAtStart: a namespace left by a killed hostd (made
// here by hand) is removed when hostd starts on the same data dir, and
// another installation's namespace is left alone.
func TestNetworkOrphansRemovedAtStart(t *testing.T) {
	a := vmmtest.FindAssets(t)
	data := vmmtest.ShortTempDir(t)
	inst := netns.InstallationOf(data)
	orphan, err := inst.Create("sb-orphan0001")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = orphan.Close() })
	_ = orphan.CloseSockets()
	_ = orphan.Tap.Close()
	other := netns.InstallationOf(data + "-other")
	keep, err := other.Create("sb-keep00000001")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keep.Close() })
	cfg := hostd.Config{Listen: "127.0.0.1:0", DataDir: data, APIKey: testKey, VMM: "qemu", Accel: "tcg",
		Kernel: a.Kernel, Initramfs: a.Initramfs, BaseImage: a.BaseImage, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- hostd.RunWithReady(ctx, cfg, func(string) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("hostd did not start")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if netns.Exists(inst.Name("sb-orphan0001")) {
		t.Error("the orphaned namespace is still there")
	}
	if !netns.Exists(keep.Name) {
		t.Error("another installation's namespace was removed")
	}
}

// checkForkPause: a fork gets its own namespace and its parent's policy; a
// paused and resumed sandbox keeps its network.
func checkForkPause(t *testing.T, c *client.Client, id, data string) {
	ctx := context.Background()
	domains := []string{"allowed.test"}
	if _, err := c.PatchNetwork(ctx, id, client.NetworkPolicyPatch{AllowDomains: &domains}); err != nil {
		t.Fatal(err)
	}
	forks, err := c.Fork(ctx, id, 1)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	f := forks[0]
	defer c.DeleteSandbox(ctx, f.ID)
	inst := netns.InstallationOf(data)
	if !netns.Exists(inst.Name(f.ID)) {
		t.Errorf("the fork has no namespace of its own")
	}
	if body, status, _ := curl(t, c, f.ID, "http://allowed.test/from-fork"); status != "200" {
		t.Errorf("fork: allowed.test got %s %q", status, body)
	}
	if _, status, _ := curl(t, c, f.ID, "--resolve", "denied.test:80:10.0.0.1", "http://denied.test/"); status != "403" {
		t.Errorf("fork: denied.test got %s, want 403", status)
	}
	if _, err := c.Pause(ctx, f.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := c.Resume(ctx, f.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if body, status, _ := curl(t, c, f.ID, "http://allowed.test/after-resume"); status != "200" {
		t.Errorf("after resume: allowed.test got %s %q", status, body)
	}
	if err := c.DeleteSandbox(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if netns.Exists(inst.Name(f.ID)) {
		t.Errorf("the fork's namespace is left after delete")
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
