package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/gateway"
	"github.com/agentbox/agentbox/fleet/gateway/gatewaytest"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/waitfor"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// fleet is a real Postgres, hosts (hostds over the in-process driver, each
// accepting its host token) and gateway replicas, all in this process.
type fleet struct {
	*gatewaytest.Fleet
	hosts map[string]string // name → URL
}

func startFleet(t *testing.T, hosts ...string) *fleet {
	t.Helper()
	a := vmmtest.FindAssets(t)
	f := &fleet{Fleet: gatewaytest.Start(t), hosts: map[string]string{}}
	for _, name := range hosts {
		url := startHost(t, a, name)
		f.hosts[name] = url
		f.AddHost(t, name, url, store.Capacity{MemMiB: 8192, VCPUs: 16, MaxSandboxes: 4})
	}
	return f
}

func startHost(t *testing.T, a vmmtest.Assets, name string) string {
	t.Helper()
	data := t.TempDir()
	logf, err := os.Create(filepath.Join(data, "hostd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostd.Config{Listen: "127.0.0.1:0", DataDir: data, APIKey: gatewaytest.Token(name),
		Kernel: a.Kernel, Initramfs: a.Initramfs, BaseImage: a.BaseImage, Network: "off", BasePool: -1, NoCgroups: true,
		Driver: vmmtest.NewFakeDriver(vmmtest.FakeOptions{}), Logger: slog.New(slog.NewTextHandler(logf, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- hostd.RunWithReady(ctx, cfg, func(s string) { addr <- s }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case s := <-addr:
		return "http://" + s
	case err := <-done:
		t.Fatalf("hostd %s: %v", name, err)
	}
	return ""
}

// gateway starts a replica and returns its URL.
func (f *fleet) gateway(t *testing.T) string { return f.Gateway(t) }

func newClient(t *testing.T, url, key string) *client.Client {
	t.Helper()
	c, err := client.New(url, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status || (code != "" && ae.Code != code) {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
}

func TestGatewayPlacesProxiesAndFences(t *testing.T) {
	f := startFleet(t, "h1", "h2")
	ctx := context.Background()
	a := newClient(t, f.gateway(t), gatewaytest.AdminKey)
	b := newClient(t, f.gateway(t), gatewaytest.AdminKey)

	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Created through replica A; used through replica B.
	if err := b.WriteFile(ctx, sb.ID, "/tmp/gw-test", 0o644, strings.NewReader("through the gateway")); err != nil {
		t.Fatal(err)
	}
	res, err := b.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/tmp/gw-test"}})
	if err != nil || res.Stdout != "through the gateway" || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	rec, err := f.Store.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	forks, err := a.Fork(ctx, sb.ID, 2)
	if err != nil || len(forks) != 2 {
		t.Fatalf("fork: %v %v", forks, err)
	}
	for _, fk := range forks {
		if r, _ := f.Store.Get(ctx, fk.ID); r.Host != rec.Host {
			t.Fatalf("fork %s on %s, parent on %s", fk.ID, r.Host, rec.Host)
		}
	}
	// The parent's host holds at most 4: a third fork does not fit there.
	_, err = a.Fork(ctx, sb.ID, 2)
	wantCode(t, err, http.StatusInsufficientStorage, gateway.CodeNoCapacity)
	list, err := b.ListSandboxes(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	for _, fk := range forks {
		if err := b.DeleteSandbox(ctx, fk.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Store.Get(ctx, forks[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted fork's record: %v", err)
	}

	// The host's lease lapses: its sandbox is lost, with why.
	h, _ := f.Store.GetHost(ctx, rec.Host)
	if err := f.Store.Heartbeat(ctx, rec.Host, h.Epoch, time.Millisecond, store.Capacity{MemMiB: 8192, VCPUs: 16, MaxSandboxes: 4}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the lease to expire", func() bool {
		exp, err := f.Store.ExpireLeases(ctx)
		return err == nil && len(exp) == 1
	})
	_, err = b.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, err, http.StatusGone, gateway.CodeSandboxLost)
	if !strings.Contains(err.Error(), "lease expired") {
		t.Fatalf("lost without its reason: %v", err)
	}
	// Creates go to the live host.
	sb2, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := f.Store.Get(ctx, sb2.ID); r.Host == rec.Host {
		t.Fatalf("placed on the dead host %s", r.Host)
	}
}

func TestGatewayTenancyAcrossReplicas(t *testing.T) {
	f := startFleet(t, "h1")
	ctx := context.Background()
	a := newClient(t, f.gateway(t), gatewaytest.AdminKey)
	bURL := f.gateway(t)
	if _, err := a.CreateProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	k, err := a.CreateKey(ctx, client.CreateKeyRequest{Name: "member", Project: "p"})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	m := newClient(t, bURL, k.Secret)
	// Another project's sandbox is not found, through either replica.
	_, err = m.Exec(ctx, mine.ID, client.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, err, http.StatusNotFound, gateway.CodeSandboxNotFound)
	theirs, err := m.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := m.ListSandboxes(ctx); err != nil || len(l) != 1 || l[0].ID != theirs.ID {
		t.Fatalf("member's list: %v %v", l, err)
	}
	// Revoked on replica A: replica B refuses it.
	if err := a.RevokeKey(ctx, k.Key.ID); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "replica B to refuse the revoked key", func() bool {
		_, err := m.ListSandboxes(ctx)
		var ae *client.APIError
		return errors.As(err, &ae) && ae.Status == http.StatusUnauthorized
	})
	// A wrong key: refused.
	_, err = newClient(t, bURL, "ab_nope").ListSandboxes(ctx)
	wantCode(t, err, http.StatusUnauthorized, "")
}

func TestGatewayDatabaseOutageFailsFast(t *testing.T) {
	f := startFleet(t, "h1")
	ctx := context.Background()
	a := newClient(t, f.gateway(t), gatewaytest.AdminKey)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.PG.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = a.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 128})
	wantCode(t, err, http.StatusServiceUnavailable, gateway.CodeFleetUnavailable)
	if err := f.PG.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "calls to work again", func() bool {
		_, err := a.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
		return err == nil
	})
	if l, err := a.ListSandboxes(ctx); err != nil || len(l) != 1 {
		t.Fatalf("after the outage: %v %v", l, err)
	}
}

func TestGatewayRefusesAHostWithTheWrongToken(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	if _, _, err := f.Store.Register(ctx, store.Registration{Name: "rogue", Addr: "http://127.0.0.1:1", TokenHash: hosttoken.Hash("abh_wrong"),
		TTL: time.Hour, Capacity: store.Capacity{MemMiB: 1 << 20, VCPUs: 1 << 10}}); err != nil {
		t.Fatal(err)
	}
	a := newClient(t, f.gateway(t), gatewaytest.AdminKey)
	_, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 128})
	wantCode(t, err, http.StatusInsufficientStorage, gateway.CodeNoCapacity)
	hosts, err := a.Hosts(ctx)
	if err != nil || len(hosts) != 1 || hosts[0].TokenAccepted {
		t.Fatalf("hosts: %+v %v", hosts, err)
	}
}

// A snapshot taken on a host directly (before it joined the fleet, say)
// is found on its host and recorded at its first use through a gateway.
func TestGatewayAdoptsAHostsSnapshot(t *testing.T) {
	f := startFleet(t, "h1")
	ctx := context.Background()
	host := newClient(t, f.hosts["h1"], gatewaytest.Token("h1"))
	sb, err := host.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := host.Snapshot(ctx, sb.ID, client.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	a := newClient(t, f.gateway(t), gatewaytest.AdminKey)
	restored, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: snap.ID, MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := f.Store.GetObject(ctx, store.KindSnapshot, snap.ID); err != nil || o.Host != "h1" {
		t.Fatalf("snapshot record: %+v %v", o, err)
	}
	if r, err := f.Store.Get(ctx, restored.ID); err != nil || r.Host != "h1" {
		t.Fatalf("restored on %+v %v", r, err)
	}
}
