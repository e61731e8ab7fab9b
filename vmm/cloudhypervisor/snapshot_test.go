package cloudhypervisor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// snapshotConfig is a config.json as Cloud Hypervisor writes it, with
// fields the spec does not know at the top, in a disk and in the vsock.
const snapshotConfig = `{
  "cpus": {"boot_vcpus": 1, "max_vcpus": 1},
  "memory": {"size": 268435456, "shared": false},
  "payload": {"kernel": "/old/vmlinux", "cmdline": "console=ttyS0"},
  "disks": [
    {"path": "/old/overlay.qcow2", "id": "disk0", "serial": "agentbox-disk0", "image_type": "Qcow2", "backing_files": true, "future_disk_field": [1, 2]},
    {"path": "/old/data.raw", "id": "disk1", "image_type": "Raw"}
  ],
  "vsock": {"cid": 3, "socket": "/old/vsock.sock", "pci_segment": 0, "future_vsock_field": "x"},
  "serial": {"mode": "File", "file": "/old/console.log"},
  "console": {"mode": "Off"},
  "landlock_enable": true,
  "landlock_rules": [{"path": "/old", "access": "rw"}],
  "preserved_fds": null,
  "future_top_field": {"nested": {"n": 12345678901234567890}}
}`

func TestRewriteConfig(t *testing.T) {
	edits := restoreEdits{
		vsockSocket:   "/new/vsock.sock",
		disks:         []string{"/new/overlay.qcow2", "/new/data.raw"},
		serialFile:    "/new/console.log",
		landlock:      true,
		landlockRules: []chapi.LandlockConfig{{Path: "/new", Access: "rw"}, {Path: "/images/base.qcow2", Access: "r"}},
	}
	out, err := rewriteConfig([]byte(snapshotConfig), edits)
	if err != nil {
		t.Fatal(err)
	}
	var got, orig map[string]any
	decode := func(b []byte, v *map[string]any) {
		t.Helper()
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.UseNumber() // keep 12345678901234567890 exact
		if err := d.Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	decode(out, &got)
	decode([]byte(snapshotConfig), &orig)

	// What must change.
	set := func(m map[string]any, path []string, v any) {
		for _, k := range path[:len(path)-1] {
			m = m[k].(map[string]any)
		}
		m[path[len(path)-1]] = v
	}
	disks := orig["disks"].([]any)
	disks[0].(map[string]any)["path"] = "/new/overlay.qcow2"
	disks[1].(map[string]any)["path"] = "/new/data.raw"
	set(orig, []string{"vsock", "socket"}, "/new/vsock.sock")
	set(orig, []string{"serial", "file"}, "/new/console.log")
	orig["landlock_rules"] = []any{
		map[string]any{"path": "/new", "access": "rw"},
		map[string]any{"path": "/images/base.qcow2", "access": "r"},
	}
	// Everything else, known or not, must come through unchanged.
	if !reflect.DeepEqual(got, orig) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(orig, "", " ")
		t.Fatalf("got\n%s\nwant\n%s", g, w)
	}
	if !strings.Contains(string(out), "12345678901234567890") {
		t.Errorf("a large number lost precision:\n%s", out)
	}
}

func TestRewriteConfigLandlock(t *testing.T) {
	out, err := rewriteConfig([]byte(snapshotConfig), restoreEdits{
		vsockSocket: "/new/vsock.sock", disks: []string{"/a", "/b"}, serialFile: "/new/c.log", landlock: false,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if string(got["landlock_enable"]) != "false" {
		t.Errorf("landlock_enable: got %s, want false (this host has no Landlock)", got["landlock_enable"])
	}
	if _, ok := got["landlock_rules"]; ok {
		t.Errorf("landlock_rules: got %s, want none", got["landlock_rules"])
	}
}

func TestRewriteConfigErrors(t *testing.T) {
	good := restoreEdits{vsockSocket: "/v", disks: []string{"/a", "/b"}, serialFile: "/s"}
	tests := []struct {
		name  string
		raw   string
		edits restoreEdits
		want  string
	}{
		{name: "not json", raw: "{", edits: good, want: "unexpected end"},
		{name: "no vsock", raw: `{"payload": {}, "disks": [{"path": "/a"}, {"path": "/b"}]}`, edits: good, want: "no vsock"},
		{name: "null vsock", raw: `{"vsock": null, "disks": [{"path": "/a"}, {"path": "/b"}]}`, edits: good, want: "no vsock"},
		{name: "fewer disks in config", raw: snapshotConfig, edits: restoreEdits{vsockSocket: "/v", disks: []string{"/a"}}, want: "2 disks, the config 1"},
		{name: "disks not a list", raw: `{"vsock": {"cid": 3, "socket": "/x"}, "disks": {}}`, edits: good, want: "disks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rewriteConfig([]byte(tc.raw), tc.edits)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestPrepareRestoreDir(t *testing.T) {
	src := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(configFile, snapshotConfig)
	write("state.json", `{}`)
	write(memoryFile, "memory")
	if err := writeMarker(src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if err := os.Mkdir(dst, 0o755); err != nil { // stale contents are replaced
		t.Fatal(err)
	}
	write2 := filepath.Join(dst, "stale")
	if err := os.WriteFile(write2, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	edits := restoreEdits{vsockSocket: "/new/v.sock", disks: []string{"/n/a", "/n/b"}, serialFile: "/n/c"}
	if err := prepareRestoreDir(src, dst, edits); err != nil {
		t.Fatal(err)
	}
	names := func(dir string) []string {
		es, _ := os.ReadDir(dir)
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	if got, want := names(dst), []string{configFile, memoryFile, "state.json"}; !reflect.DeepEqual(got, want) {
		t.Errorf("restore dir: got %v, want %v", got, want)
	}
	for _, name := range []string{memoryFile, "state.json"} {
		a, _ := os.Stat(filepath.Join(src, name))
		b, _ := os.Stat(filepath.Join(dst, name))
		if a == nil || b == nil || !os.SameFile(a, b) {
			t.Errorf("%s: not a hard link of the snapshot's file", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, configFile)); !strings.Contains(string(b), "/new/v.sock") {
		t.Errorf("config.json was not rewritten:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(src, configFile)); string(b) != snapshotConfig {
		t.Errorf("the snapshot's own config.json changed")
	}

	t.Run("no memory", func(t *testing.T) {
		if err := os.Remove(filepath.Join(src, memoryFile)); err != nil {
			t.Fatal(err)
		}
		err := prepareRestoreDir(src, dst, edits)
		if err == nil || !strings.Contains(err.Error(), memoryFile) {
			t.Fatalf("got %v, want an error naming %s", err, memoryFile)
		}
	})
}

func TestCheckMarker(t *testing.T) {
	tests := []struct {
		name    string
		content *string
		wantErr error
	}{
		{name: "ours", content: ptr(markerValue)},
		{name: "missing", wantErr: vmm.ErrUnsupported},
		{name: "qemu", content: ptr("qemu\n"), wantErr: vmm.ErrUnsupported},
		{name: "empty", content: ptr(""), wantErr: vmm.ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != nil {
				if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(*tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := checkMarker(dir)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// snapshotAPI fakes the API for VM.Snapshot: vm.snapshot writes files into
// the destination, or fails.
type snapshotAPI struct {
	apiClient // calls other than Snapshot panic
	err       error
	calls     int
}

func (a *snapshotAPI) Snapshot(_ context.Context, destURL string) error {
	a.calls++
	if a.err != nil {
		return a.err
	}
	dir := strings.TrimPrefix(destURL, "file://")
	for _, name := range []string{configFile, "state.json", memoryFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func TestVMSnapshot(t *testing.T) {
	newVM := func(api apiClient) *VM {
		return newVM(pathsFor(t.TempDir()), api, &process{done: make(chan struct{})}, slog.New(slog.DiscardHandler))
	}
	t.Run("moves the files and marks the dir", func(t *testing.T) {
		api := &snapshotAPI{}
		v, dir := newVM(api), t.TempDir()
		if err := v.Snapshot(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
		if err := checkMarker(dir); err != nil {
			t.Error(err)
		}
		for _, name := range []string{configFile, "state.json", memoryFile} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Error(err)
			}
		}
		if _, err := os.Stat(v.paths.staging); !os.IsNotExist(err) {
			t.Errorf("staging dir left behind: %v", err)
		}
	})
	t.Run("refuses a dir that is not empty", func(t *testing.T) {
		api := &snapshotAPI{}
		v, dir := newVM(api), t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := v.Snapshot(context.Background(), dir); err == nil || api.calls != 0 {
			t.Fatalf("got %v after %d API calls, want an error and none", err, api.calls)
		}
	})
	t.Run("API error", func(t *testing.T) {
		apiErr := &APIError{Endpoint: "vm.snapshot", Status: 405}
		v, dir := newVM(&snapshotAPI{err: apiErr}), t.TempDir()
		err := v.Snapshot(context.Background(), dir)
		if !errors.Is(err, ErrWrongState) {
			t.Fatalf("got %v, want ErrWrongState", err)
		}
		if es, _ := os.ReadDir(dir); len(es) != 0 {
			t.Errorf("dir not empty after a failed snapshot: %v", es)
		}
		if _, err := os.Stat(v.paths.staging); !os.IsNotExist(err) {
			t.Errorf("staging dir left behind: %v", err)
		}
	})
	t.Run("exited VM", func(t *testing.T) {
		v := newVM(&snapshotAPI{})
		close(v.proc.done)
		<-v.Done()
		if err := v.Snapshot(context.Background(), t.TempDir()); !errors.Is(err, vmm.ErrNotRunning) {
			t.Fatalf("got %v, want vmm.ErrNotRunning", err)
		}
	})
}

func TestRewriteConfigNetLimit(t *testing.T) {
	raw := strings.Replace(snapshotConfig, `"console":`, `"net": [
    {"id": "net0", "fds": [-1], "rate_limiter_config": {"bandwidth": {"size": 1, "refill_time": 1}}, "future_net_field": 7},
    {"id": "other", "rate_limiter_config": {"bandwidth": {"size": 2, "refill_time": 2}}}
  ],
  "console":`, 1)
	base := restoreEdits{vsockSocket: "/new/vsock.sock", disks: []string{"/a", "/b"}, serialFile: "/new/c.log"}
	tests := []struct {
		name    string
		limiter *chapi.RateLimiterConfig
		want    string // net0's rate_limiter_config, "" for none
	}{
		{"replaced", rateLimiter(1 << 20), `{"bandwidth":{"refill_time":100,"size":104857}}`},
		{"removed", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := base
			e.netLimit = &netLimitEdit{id: netID, limiter: tc.limiter}
			out, err := rewriteConfig([]byte(raw), e)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Net []map[string]json.RawMessage `json:"net"`
			}
			if err := json.Unmarshal(out, &got); err != nil || len(got.Net) != 2 {
				t.Fatalf("got %s, %v", out, err)
			}
			if rl := got.Net[0]["rate_limiter_config"]; string(compact(t, rl)) != tc.want {
				t.Errorf("net0 rate_limiter_config: got %s, want %q", rl, tc.want)
			}
			if string(got.Net[0]["future_net_field"]) != "7" {
				t.Errorf("net0 lost a field it does not know: %s", out)
			}
			if rl := compact(t, got.Net[1]["rate_limiter_config"]); string(rl) != `{"bandwidth":{"refill_time":2,"size":2}}` {
				t.Errorf("another NIC's limiter changed: %s", rl)
			}
		})
	}
}

func compact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	if raw == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return b
}
