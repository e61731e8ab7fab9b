//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/nettest"
	"github.com/agentbox/agentbox/internal/testwheel"
)

// TestFlightRecorder runs one traced session in a real sandbox: pip
// installs a local wheel, a command writes a file, curl fetches an allowed
// host. The log must hold the exec, file, package and network events in the
// order they happened, each with the caller's trace id, and no env value.
func TestFlightRecorder(t *testing.T) {
	up := nettest.New(t)
	c, _ := startNetHostd(t, up)
	var tid trace.TraceID
	var sid trace.SpanID
	rand.Read(tid[:])
	rand.Read(sid[:])
	base, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctx := trace.ContextWithRemoteSpanContext(base, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))

	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512,
		Network: &client.NetworkPolicyInput{AllowDomains: []string{"allowed.test"}}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
	const whl = "/root/agentbox_demo-0.1-py3-none-any.whl"
	if err := c.WriteFile(ctx, sb.ID, whl, 0o644, bytes.NewReader(wheel(t, "agentbox-demo", "VALUE = 42\n"))); err != nil {
		t.Fatalf("write wheel: %v", err)
	}
	const secretValue = "value-that-must-not-be-logged-3f9a"
	run := func(env map[string]string, argv ...string) client.ExecResult {
		t.Helper()
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: argv, Env: env})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %v: %+v, %v", argv, r, err)
		}
		return r
	}
	start := time.Now()
	run(map[string]string{"DEMO_TOKEN": secretValue}, "pip", "install", "--no-index", "--break-system-packages", whl)
	t.Logf("pip install of a local wheel: %v", time.Since(start).Round(time.Millisecond))
	run(nil, "sh", "-c", "echo hello > /root/notes.txt")
	run(nil, "curl", "-sS", "-m", "20", "-o", "/dev/null", "http://allowed.test/plain")
	// dpkg for real (a package built in the guest); npm is not in the
	// image, so its layout is written the way npm writes it.
	run(nil, "sh", "-c", `mkdir -p /root/deb/DEBIAN && printf 'Package: agentbox-demo-deb\nVersion: 1.2-3\nArchitecture: all\nMaintainer: t <t@t.test>\nDescription: demo\n' > /root/deb/DEBIAN/control && dpkg-deb --build /root/deb /root/demo.deb >/dev/null && dpkg -i /root/demo.deb`)
	run(nil, "sh", "-c", `mkdir -p /root/app/node_modules/left-pad && printf '{"name":"left-pad","version":"1.3.0"}' > /root/app/node_modules/left-pad/package.json`)

	evs := allEvents(t, c, sb.ID)
	checkFlightOrder(t, evs, tid.String())
	checkPackage(t, evs, "dpkg", "agentbox-demo-deb", "1.2-3")
	checkPackage(t, evs, "npm", "left-pad", "1.3.0")
	for _, e := range evs {
		if b, _ := json.Marshal(e); bytes.Contains(b, []byte(secretValue)) {
			t.Errorf("event %d holds an env value: %s", e.ID, b)
		}
	}
	var lines bytes.Buffer
	if err := c.ExportEvents(ctx, sb.ID, client.EventQuery{}, &lines); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(lines.String(), "\n"); n < len(evs) {
		t.Errorf("JSON Lines export: %d lines, want at least the %d events listed", n, len(evs))
	}
}

// allEvents pages through a sandbox's whole log.
func allEvents(t *testing.T, c *client.Client, id string) []client.AuditEvent {
	t.Helper()
	var out []client.AuditEvent
	q := client.EventQuery{Limit: 500}
	for {
		page, err := c.Events(context.Background(), id, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Events...)
		if len(page.Events) < q.Limit {
			return out
		}
		q.After = page.NextAfter
	}
}

// checkFlightOrder finds, in order: pip's exec start, the package event, its
// exec end, the guest's file event, curl's exec start and the network event.
func checkFlightOrder(t *testing.T, evs []client.AuditEvent, traceID string) {
	t.Helper()
	hello := sha256.Sum256([]byte("hello\n"))
	steps := []struct {
		what string
		ok   func(e client.AuditEvent) bool
	}{
		{"pip's exec start", func(e client.AuditEvent) bool {
			return e.Exec != nil && e.Exec.Phase == "start" && argvHas(e.Exec.Argv, "pip") && argvHas(e.Exec.EnvKeys, "DEMO_TOKEN")
		}},
		{"the package event", func(e client.AuditEvent) bool {
			p := e.Package
			return p != nil && p.Manager == "pip" && p.Action == "installed" && normalize(p.Name) == "agentbox-demo" && p.Version == "0.1"
		}},
		{"pip's exec end", func(e client.AuditEvent) bool {
			x := e.Exec
			return x != nil && x.Phase == "end" && argvHas(x.Argv, "pip") && x.ExitCode != nil && *x.ExitCode == 0 &&
				x.Stdout != nil && strings.Contains(string(x.Stdout.Head), "Successfully installed") && x.Stdout.Sha256 != ""
		}},
		{"the file event", func(e client.AuditEvent) bool {
			f := e.File
			return f != nil && f.Source == "guest" && f.Path == "/root/notes.txt" && f.Size == 6 && deref(f.Sha256) == hex.EncodeToString(hello[:])
		}},
		{"curl's exec start", func(e client.AuditEvent) bool {
			return e.Exec != nil && e.Exec.Phase == "start" && argvHas(e.Exec.Argv, "curl")
		}},
		{"the network event", func(e client.AuditEvent) bool {
			n := e.Network
			return n != nil && n.Host == "allowed.test" && n.Allowed && deref(n.Path) == "/plain"
		}},
	}
	i := 0
	for _, st := range steps {
		for i < len(evs) && !st.ok(evs[i]) {
			i++
		}
		if i == len(evs) {
			t.Errorf("no %s after the steps before it", st.what)
			dumpEvents(t, evs)
			return
		}
		if got := deref(evs[i].TraceID); got != traceID {
			t.Errorf("%s (event %d): trace id %q, want the caller's %s", st.what, evs[i].ID, got, traceID)
		}
		i++
	}
}

func checkPackage(t *testing.T, evs []client.AuditEvent, manager, name, version string) {
	t.Helper()
	for _, e := range evs {
		if p := e.Package; p != nil && string(p.Manager) == manager && p.Name == name && p.Version == version && p.Action == "installed" {
			if e.TraceID == nil {
				t.Errorf("%s package %s: no trace id", manager, name)
			}
			return
		}
	}
	t.Errorf("no %s package event for %s %s", manager, name, version)
}

func dumpEvents(t *testing.T, evs []client.AuditEvent) {
	for _, e := range evs {
		b, _ := json.Marshal(e)
		if len(b) > 400 {
			b = append(b[:400], "…"...)
		}
		t.Logf("%s", b)
	}
}

func argvHas(argv *[]string, s string) bool {
	for _, a := range deref(argv) {
		if a == s {
			return true
		}
	}
	return false
}

func normalize(name string) string { return strings.ToLower(strings.ReplaceAll(name, "_", "-")) }

func wheel(t *testing.T, name, body string) []byte {
	t.Helper()
	b, err := testwheel.Build(name, "0.1", body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
