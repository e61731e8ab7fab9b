package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func newTestManager(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroup tests need root")
	}
	inst := fmt.Sprintf("test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", ".", "-").Replace(t.Name()))
	m, err := New(inst)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no cgroups here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ids, _ := m.List()
		for _, id := range ids {
			_ = m.Remove(id)
		}
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

func TestGroupLimitsStatsDelete(t *testing.T) {
	m := newTestManager(t)
	g, err := m.Create("sb-1", Limits{CPUs: 0.5, MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addErr := g.Add(cmd.Process.Pid)
	waitErr := cmd.Wait()
	if addErr != nil || waitErr != nil {
		t.Fatalf("add: %v, wait: %v", addErr, waitErr)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUSeconds <= 0 {
		t.Errorf("got %v CPU seconds, want > 0", st.CPUSeconds)
	}
	if got, want := readLimit(t, m, "sb-1"), "64"; !strings.Contains(got, want) {
		t.Logf("memory limit file: %s", got)
	}
	ids, err := m.List()
	if err != nil || len(ids) != 1 || ids[0] != "sb-1" {
		t.Fatalf("got %v, %v, want [sb-1]", ids, err)
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := m.List(); len(ids) != 0 {
		t.Fatalf("got %v after delete, want none", ids)
	}
}

func readLimit(t *testing.T, m *Manager, id string) string {
	p := "/sys/fs/cgroup/memory" + m.path(id) + "/memory.limit_in_bytes"
	if m.v2 {
		p = "/sys/fs/cgroup" + m.path(id) + "/memory.max"
	}
	b, _ := os.ReadFile(p)
	return string(b)
}

func TestRemoveMissing(t *testing.T) {
	m := newTestManager(t)
	if err := m.Remove("sb-none"); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
}

// TestRefusedLimitsLeaveNoGroup: a limit the kernel refuses (a CPU quota
// over its maximum) fails Create and leaves no directory in any hierarchy
// (issue 16: five v1 hierarchies kept one that the reaper never saw).
func TestRefusedLimitsLeaveNoGroup(t *testing.T) {
	m := newTestManager(t)
	if _, err := m.Create("sb-bad", Limits{CPUs: 1e10}); err == nil {
		t.Fatal("a quota of 1e10 CPUs was accepted")
	}
	if ids, err := m.List(); err != nil || len(ids) != 0 {
		t.Fatalf("groups after a refused create: %v %v", ids, err)
	}
	dirs := []string{unifiedRoot + m.path("sb-bad")}
	if !m.v2 {
		hs, _ := v1Hierarchies()
		dirs = dirs[:0]
		for _, h := range hs {
			dirs = append(dirs, h+m.path("sb-bad"))
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left: %v", d, err)
		}
	}
	// The reaper's view: a group in some hierarchy only is still listed
	// and removed.
	if !m.v2 {
		hs, _ := v1Hierarchies()
		half := hs[0] + m.path("sb-half")
		if err := os.MkdirAll(half, 0o755); err != nil {
			t.Fatal(err)
		}
		if ids, _ := m.List(); len(ids) != 1 || ids[0] != "sb-half" {
			t.Fatalf("a half-made group is not listed: %v", ids)
		}
		if err := m.Remove("sb-half"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(half); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Remove left %s", half)
		}
	}
}

// TestBackgroundWeight: a background group has the least CPU weight, and
// SetBackground moves it to the default weight and back.
func TestBackgroundWeight(t *testing.T) {
	m := newTestManager(t)
	g, err := m.Create("sb-bg", Limits{CPUs: 0.5, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	least, def := "2", "1024"
	if m.v2 {
		least, def = "1", "100"
	}
	if got := readWeight(t, m, "sb-bg"); got != least {
		t.Fatalf("created in the background: weight %s, want %s", got, least)
	}
	if err := g.SetBackground(false); err != nil {
		t.Fatal(err)
	}
	if got := readWeight(t, m, "sb-bg"); got != def {
		t.Fatalf("after SetBackground(false): weight %s, want %s", got, def)
	}
	if err := g.SetBackground(true); err != nil {
		t.Fatal(err)
	}
	if got := readWeight(t, m, "sb-bg"); got != least {
		t.Fatalf("after SetBackground(true): weight %s, want %s", got, least)
	}
	if got := readQuota(t, m, "sb-bg"); !strings.Contains(got, "50000") {
		t.Fatalf("the CPU quota did not survive the weight changes: %q", got)
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
}

func readWeight(t *testing.T, m *Manager, id string) string {
	return strings.TrimSpace(readCPUFile(t, m, id, "cpu.shares", "cpu.weight"))
}

func readQuota(t *testing.T, m *Manager, id string) string {
	return readCPUFile(t, m, id, "cpu.cfs_quota_us", "cpu.max")
}

// readCPUFile reads group id's cpu controller file: v1 on the legacy
// layout, v2 on the unified one.
func readCPUFile(t *testing.T, m *Manager, id, v1, v2 string) string {
	t.Helper()
	p := "/sys/fs/cgroup/cpu" + m.path(id) + "/" + v1
	if m.v2 {
		p = "/sys/fs/cgroup" + m.path(id) + "/" + v2
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
