package cloudhypervisor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// inProcessFake serves fakeCH in this process on a socket of its own and
// returns a client for it and a function that returns the records so far.
// Violations fail the test at cleanup.
func inProcessFake(t *testing.T, opts fakeOptions) (*restClient, func() []fakeRecord) {
	t.Helper()
	s, err := loadSpec(specPath)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var recs []fakeRecord
	opts.emit = func(r fakeRecord) {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, r)
	}
	f := newFakeCH(s, opts)
	go f.serve(l)
	c := newRESTClient(sock)
	records := func() []fakeRecord {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(recs)
	}
	t.Cleanup(func() {
		c.Close()
		l.Close()
		f.close()
		for _, r := range records() {
			if r.Violation != "" {
				t.Errorf("fake cloud-hypervisor: %s %s: %s", r.Method, r.Endpoint, r.Violation)
			}
		}
	})
	return c, records
}

// createVM sends the vm.create body that the driver builds for a test config.
func createVM(t *testing.T, c *restClient) vmm.Config {
	t.Helper()
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "sb")
	d := &Driver{landlock: true}
	if err := c.Create(context.Background(), d.vmConfig(cfg, pathsFor(cfg.Dir), nil)); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tapFile stands in for a tap device: a file whose content names it, so
// the fake can tell which descriptor arrived where.
func tapFile(t *testing.T, name string) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(name), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestContractClientStatuses(t *testing.T) {
	ctx := context.Background()
	do := func(a action) func(*testing.T, *restClient) error {
		return func(_ *testing.T, c *restClient) error { return c.Do(ctx, a) }
	}
	created := func(t *testing.T, c *restClient) { createVM(t, c) }
	booted := func(t *testing.T, c *restClient) {
		createVM(t, c)
		if err := c.Do(ctx, actBoot); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		fail   map[string]int
		setup  func(*testing.T, *restClient)
		call   func(*testing.T, *restClient) error
		status int
		want   []error
	}{
		{name: "boot before create", call: do(actBoot), status: 404, want: []error{ErrNotFound}},
		{name: "pause before create", call: do(actPause), status: 404, want: []error{ErrNotFound}},
		{name: "pause before boot", setup: created, call: do(actPause), status: 405, want: []error{ErrWrongState}},
		{name: "resume of a running VM", setup: booted, call: do(actResume), status: 405, want: []error{ErrWrongState}},
		{name: "shutdown before boot", setup: created, call: do(actShutdownVM), status: 405, want: []error{ErrWrongState}},
		{name: "shutdown before create", call: do(actShutdownVM), status: 404, want: []error{ErrNotFound}},
		{name: "info before create", call: func(_ *testing.T, c *restClient) error { _, err := c.Info(ctx); return err },
			status: 404, want: []error{ErrNotFound}},
		{name: "snapshot of a running VM", setup: booted,
			call:   func(t *testing.T, c *restClient) error { return c.Snapshot(ctx, fileURL(t.TempDir())) },
			status: 405, want: []error{ErrWrongState}},
		{name: "restore on a created VM", setup: created,
			call: func(t *testing.T, c *restClient) error {
				return c.Restore(ctx, restoreConfig{RestoreConfig: chapi.RestoreConfig{SourceUrl: fileURL(t.TempDir())}}, nil)
			},
			status: 404, want: []error{ErrNotFound}},
		{name: "add-net with an id in use", setup: booted,
			call: func(t *testing.T, c *restClient) error {
				cfg := chapi.NetConfig{Id: ptr("net0")}
				if _, err := c.AddNet(ctx, cfg, []*os.File{tapFile(t, "tap0")}); err != nil {
					t.Fatal(err)
				}
				_, err := c.AddNet(ctx, cfg, []*os.File{tapFile(t, "tap1")})
				return err
			},
			status: 409, want: []error{ErrConflict}},
		{name: "add-net without a tap", setup: booted,
			call: func(t *testing.T, c *restClient) error {
				_, err := c.AddNet(ctx, chapi.NetConfig{Id: ptr("net0")}, nil)
				return err
			},
			status: 400, want: []error{ErrBadRequest, vmm.ErrInvalidConfig}},
		{name: "add-net fails in the VMM", setup: booted, fail: map[string]int{"vm.add-net": 500},
			call: func(t *testing.T, c *restClient) error {
				_, err := c.AddNet(ctx, chapi.NetConfig{Id: ptr("net0")}, []*os.File{tapFile(t, "tap0")})
				return err
			},
			status: 500, want: []error{ErrInternal}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := inProcessFake(t, fakeOptions{fail: tc.fail})
			if tc.setup != nil {
				tc.setup(t, c)
			}
			err := tc.call(t, c)
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tc.status {
				t.Fatalf("got %v, want an *APIError with status %d", err, tc.status)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("got %v, want it to match %v", err, w)
				}
			}
			t.Logf("%v", err)
		})
	}
}

func TestContractClientLifecycle(t *testing.T) {
	ctx := context.Background()
	c, records := inProcessFake(t, fakeOptions{})
	ping, err := c.Ping(ctx)
	if err != nil || ping.Version == "" {
		t.Fatalf("Ping: got %+v, %v", ping, err)
	}
	cfg := createVM(t, c)
	steps := []action{actBoot, actPause, actResume, actPause}
	for _, a := range steps {
		if err := c.Do(ctx, a); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
	info, err := c.Info(ctx)
	if err != nil || info.State != chapi.VmStatePaused || deref(info.Config.Payload.Kernel) != cfg.Kernel {
		t.Fatalf("Info: got %+v, %v", info, err)
	}
	snap := t.TempDir()
	if err := c.Snapshot(ctx, fileURL(snap)); err != nil {
		t.Fatal(err)
	}
	if counters, err := c.Counters(ctx); err != nil || len(counters) == 0 {
		t.Fatalf("Counters: got %v, %v", counters, err)
	}
	for _, a := range []action{actShutdownVM, actDeleteVM, actShutdownVMM} {
		if err := c.Do(ctx, a); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
	var got []string
	for _, r := range records() {
		got = append(got, r.Endpoint)
	}
	want := []string{"vmm.ping", "vm.create", "vm.boot", "vm.pause", "vm.resume", "vm.pause", "vm.info",
		"vm.snapshot", "vm.counters", "vm.shutdown", "vm.delete", "vmm.shutdown"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestContractSCMRights checks that descriptors arrive, in order, with the
// request they belong to: vm.add-net, then vm.restore with net_fds.
func TestContractSCMRights(t *testing.T) {
	ctx := context.Background()
	c, records := inProcessFake(t, fakeOptions{})
	createVM(t, c)
	if err := c.Do(ctx, actBoot); err != nil {
		t.Fatal(err)
	}
	dev, err := c.AddNet(ctx, chapi.NetConfig{Id: ptr("net0"), Mac: ptr("52:54:00:12:34:56")}, []*os.File{tapFile(t, "tap-boot")})
	if err != nil || dev == nil || dev.Id != "net0" {
		t.Fatalf("AddNet: got %+v, %v", dev, err)
	}
	if err := c.Do(ctx, actPause); err != nil {
		t.Fatal(err)
	}
	snap := t.TempDir()
	if err := c.Snapshot(ctx, fileURL(snap)); err != nil {
		t.Fatal(err)
	}

	// A new VMM restores the snapshot with new taps for net0, from a copy
	// with paths of its own (the first VM still holds its vsock socket).
	c2, records2 := inProcessFake(t, fakeOptions{})
	restored := restoredCopy(t, snap)
	rc := restoreConfig{
		RestoreConfig: chapi.RestoreConfig{SourceUrl: fileURL(restored)},
		NetFDs:        []restoredNet{{ID: "net0", NumFDs: 2}},
	}
	if err := c2.Restore(ctx, rc, []*os.File{tapFile(t, "tap-a"), tapFile(t, "tap-b")}); err != nil {
		t.Fatal(err)
	}

	addNet := recordsOf(records(), "vm.add-net")
	restore := recordsOf(records2(), "vm.restore")
	if len(addNet) != 1 || !slices.Equal(addNet[0].FDData, []string{"tap-boot"}) {
		t.Errorf("vm.add-net: got %+v, want the descriptor of tap-boot", addNet)
	}
	if len(restore) != 1 || !slices.Equal(restore[0].FDData, []string{"tap-a", "tap-b"}) {
		t.Errorf("vm.restore: got %+v, want the descriptors of tap-a and tap-b, in order", restore)
	}
	if info, err := c2.Info(ctx); err != nil || info.State != chapi.VmStatePaused {
		t.Errorf("restored VM: got %v, %v; want Paused", info.State, err)
	}
}

// restoredCopy prepares the snapshot in snap for a VM of its own, as
// Driver.Restore does, and returns the copy's directory.
func restoredCopy(t *testing.T, snap string) string {
	t.Helper()
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "restored")
	dst := filepath.Join(cfg.Dir, "restored-snapshot")
	edits := restoreEdits{vsockSocket: pathsFor(cfg.Dir).vsock, disks: []string{cfg.Disks[0].Path}, serialFile: cfg.ConsoleLog}
	if err := prepareRestoreDir(snap, dst, edits); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestContractSCMRightsCountMismatch(t *testing.T) {
	ctx := context.Background()
	c, _ := inProcessFake(t, fakeOptions{})
	createVM(t, c)
	if err := c.Do(ctx, actBoot); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddNet(ctx, chapi.NetConfig{Id: ptr("net0")}, []*os.File{tapFile(t, "tap")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, actPause); err != nil {
		t.Fatal(err)
	}
	snap := t.TempDir()
	if err := c.Snapshot(ctx, fileURL(snap)); err != nil {
		t.Fatal(err)
	}
	c2, _ := inProcessFake(t, fakeOptions{})
	rc := restoreConfig{RestoreConfig: chapi.RestoreConfig{SourceUrl: fileURL(restoredCopy(t, snap))}, NetFDs: []restoredNet{{ID: "net0", NumFDs: 2}}}
	err := c2.Restore(ctx, rc, []*os.File{tapFile(t, "only-one")})
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("got %v, want ErrBadRequest (2 descriptors announced, 1 sent)", err)
	}
}

func TestContractClientDeadline(t *testing.T) {
	holds := map[string]*held{"vm.pause": newHeld(t), "vm.add-net": newHeld(t)}
	c, _ := inProcessFake(t, fakeOptions{hold: holds})
	createVM(t, c)
	calls := map[string]struct {
		endpoint string
		call     func(context.Context) error
	}{
		"net/http": {"vm.pause", func(ctx context.Context) error { return c.Do(ctx, actPause) }},
		"SCM_RIGHTS": {"vm.add-net", func(ctx context.Context) error {
			_, err := c.AddNet(ctx, chapi.NetConfig{Id: ptr("n")}, []*os.File{tapFile(t, "tap")})
			return err
		}},
	}
	for name, tc := range calls {
		t.Run(name, func(t *testing.T) {
			// The fake holds the answer until the test ends: a call that
			// waited for it would not return while its ctx ends.
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			go func() {
				<-holds[tc.endpoint].arrived
				cancel(context.DeadlineExceeded)
			}()
			err := tc.call(ctx)
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want the ctx's end", err)
			}
		})
	}
}

func TestAPIError(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   []error
		msg    string
	}{
		{status: http.StatusBadRequest, body: `["Error from API", "invalid disk id"]`, want: []error{ErrBadRequest, vmm.ErrInvalidConfig}, msg: "Error from API: invalid disk id"},
		{status: http.StatusNotFound, want: []error{ErrNotFound}},
		{status: http.StatusMethodNotAllowed, want: []error{ErrWrongState}},
		{status: http.StatusConflict, want: []error{ErrConflict}},
		{status: http.StatusTooManyRequests, want: []error{ErrBusy}},
		{status: http.StatusInternalServerError, body: "plain text\n", want: []error{ErrInternal}, msg: "plain text"},
		{status: http.StatusTeapot, want: []error{ErrInternal}},
	}
	for _, tc := range tests {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			err := newAPIError("vm.x", tc.status, []byte(tc.body))
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("got %v, want it to match %v", err, w)
				}
			}
			if err.Message != tc.msg {
				t.Errorf("message: got %q, want %q", err.Message, tc.msg)
			}
			if tc.status != http.StatusBadRequest && errors.Is(err, vmm.ErrInvalidConfig) {
				t.Errorf("%d matches vmm.ErrInvalidConfig", tc.status)
			}
		})
	}
}
