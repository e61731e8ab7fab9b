package cloudhypervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmm"
)

func TestNewBinaryNotFound(t *testing.T) {
	t.Setenv(EnvBinary, "")
	t.Setenv("PATH", t.TempDir())
	for name, opts := range map[string]Options{
		"explicit": {Binary: filepath.Join(t.TempDir(), "cloud-hypervisor"), DataDirs: []string{t.TempDir()}},
		"on PATH":  {DataDirs: []string{t.TempDir()}},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := New(opts)
			if !errors.Is(err, vmm.ErrBinaryNotFound) || d != nil {
				t.Fatalf("got %v, %v; want vmm.ErrBinaryNotFound", d, err)
			}
			if !strings.Contains(err.Error(), "install") {
				t.Errorf("the error does not say what to do: %v", err)
			}
		})
	}
	if _, err := Available(); !errors.Is(err, vmm.ErrBinaryNotFound) {
		t.Errorf("Available: got %v, want vmm.ErrBinaryNotFound", err)
	}
}

func TestAvailable(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ch")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinary, bin)
	if got, err := Available(); err != nil || got != bin {
		t.Errorf("with %s set: got %q, %v; want %q", EnvBinary, got, err, bin)
	}
	t.Setenv(EnvBinary, "")
	t.Setenv("PATH", filepath.Dir(bin))
	if err := os.Rename(bin, filepath.Join(filepath.Dir(bin), "cloud-hypervisor")); err != nil {
		t.Fatal(err)
	}
	if got, err := Available(); err != nil || filepath.Base(got) != "cloud-hypervisor" {
		t.Errorf("on PATH: got %q, %v", got, err)
	}
}

func TestNewOptions(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{name: "defaults", opts: Options{Binary: exe, DataDirs: []string{t.TempDir()}}, ok: true},
		{name: "copy restore", opts: Options{Binary: exe, DataDirs: []string{t.TempDir()}, MemoryRestoreMode: "Copy"}, ok: true},
		{name: "no data dirs", opts: Options{Binary: exe}},
		{name: "data dir not created yet", opts: Options{Binary: exe, DataDirs: []string{"/nonexistent/agentbox"}}, ok: true},
		{name: "relative data dir", opts: Options{Binary: exe, DataDirs: []string{"data"}}, ok: true},
		{name: "bad restore mode", opts: Options{Binary: exe, DataDirs: []string{t.TempDir()}, MemoryRestoreMode: "Lazy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(tc.opts)
			if tc.ok {
				if err != nil || d.Name() != "cloud-hypervisor" {
					t.Fatalf("got %v, %v", d, err)
				}
				if d.restoreMode != "Copy" && d.restoreMode != "OnDemand" {
					t.Errorf("restore mode %q", d.restoreMode)
				}
				return
			}
			if !errors.Is(err, vmm.ErrInvalidConfig) {
				t.Fatalf("got %v, want vmm.ErrInvalidConfig", err)
			}
		})
	}
}

func TestStartValidates(t *testing.T) {
	d, records := fakeDriver(t)
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "sb")
	cfg.VCPUs = 0
	if _, err := d.Start(t.Context(), cfg); !errors.Is(err, vmm.ErrInvalidConfig) {
		t.Fatalf("got %v, want vmm.ErrInvalidConfig", err)
	}
	cfg = testVMConfig(t, realDir(t, t.TempDir()), "sb")
	cfg.Dir = filepath.Join(cfg.Dir, strings.Repeat("x", 100))
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Start(t.Context(), cfg); !errors.Is(err, vmm.ErrInvalidConfig) {
		t.Fatalf("long Dir: got %v, want vmm.ErrInvalidConfig", err)
	}
	if rs := readRecords(t, records); len(rs) != 0 {
		t.Errorf("a VMM was started for an invalid config")
	}
}
