package oomguard

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name, record string
		want         string // name/reason/rss, or "" for none
		pid          int32
	}{
		{"cgroup", "3,812,40123456,-;Memory cgroup out of memory: Killed process 345 (tail) total-vm:433000kB, anon-rss:420132kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:900kB oom_score_adj:0\n SUBSYSTEM=x", "tail/cgroup/420132", 345},
		{"global", "3,9,1,-;Out of memory: Killed process 7 (python3) total-vm:1kB, anon-rss:2048kB, file-rss:0kB", "python3/global/2048", 7},
		{"other line", "6,10,1,-;eth0: link up", "", 0},
		{"no prefix", "Out of memory: Killed process 7 (x) total-vm:1kB, anon-rss:1kB", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := Parse(tc.record)
			if tc.want == "" {
				if ev != nil {
					t.Fatalf("got %v, want none", ev)
				}
				return
			}
			o := ev.GetOom()
			if o == nil {
				t.Fatalf("got %v, want an OOM event", ev)
			}
			got := strings.Join([]string{o.Name, o.Reason, itoa(o.RssKib)}, "/")
			if got != tc.want || ev.Pid != tc.pid {
				t.Errorf("got %s pid %d, want %s pid %d", got, ev.Pid, tc.want, tc.pid)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestReserveFor(t *testing.T) {
	for _, tc := range []struct{ total, want int64 }{
		{256 << 20, MinReserve}, {1 << 30, 128 << 20}, {16 << 30, MaxReserve},
	} {
		if got := ReserveFor(tc.total); got != tc.want {
			t.Errorf("ReserveFor(%d) = %d, want %d", tc.total, got, tc.want)
		}
	}
}

// TestSetup runs Setup on a directory laid out as cgroupfs.
func TestSetup(t *testing.T) {
	root := t.TempDir()
	meminfo := filepath.Join(root, "meminfo")
	os.WriteFile(meminfo, []byte("MemTotal:         500000 kB\nMemFree: 1 kB\n"), 0o644)
	dir := filepath.Join(root, "agentbox-exec")
	limit, err := Setup(root, dir, meminfo)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(500000<<10) - MinReserve; limit != want {
		t.Errorf("limit %d, want %d", limit, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory.max")); string(b) != itoa(limit) {
		t.Errorf("memory.max %q, want %d", b, limit)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory.high")); string(b) != itoa(HighFor(limit)) {
		t.Errorf("memory.high %q, want %d", b, HighFor(limit))
	}
	if b, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); string(b) != "+memory" {
		t.Errorf("subtree_control %q", b)
	}
}

// TestLargest picks the cgroup's process (in it or a child cgroup) with
// the most resident memory, from a procfs and a cgroupfs laid out as files.
func TestLargest(t *testing.T) {
	root := t.TempDir()
	proc, cg := filepath.Join(root, "proc"), filepath.Join(root, "cg")
	for pid, statm := range map[string]string{"1": "9 99999 0", "40": "10 300 0", "41": "10 5000 0", "42": "10 20 0"} {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.WriteFile(filepath.Join(proc, pid, "statm"), []byte(statm+"\n"), 0o644)
	}
	os.MkdirAll(filepath.Join(cg, "sub"), 0o755)
	os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte("1\n40\n"), 0o644)
	os.WriteFile(filepath.Join(cg, "sub", "cgroup.procs"), []byte("41\n42\n"), 0o644)
	g := &Guard{Dir: cg, Proc: proc}
	pid, rss := g.largest()
	if want := int64(5000*os.Getpagesize()) >> 10; pid != 41 || rss != want {
		t.Errorf("largest: pid %d rss %d KiB, want 41 and %d", pid, rss, want)
	}
}

func TestHighFor(t *testing.T) {
	for _, tc := range []struct{ limit, want int64 }{
		{256 << 20, 240 << 20}, {1 << 30, (1 << 30) - 32<<20},
	} {
		if got := HighFor(tc.limit); got != tc.want {
			t.Errorf("HighFor(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
}

func TestAnonFull(t *testing.T) {
	cg := t.TempDir()
	high := int64(400 << 20)
	os.WriteFile(filepath.Join(cg, "memory.high"), []byte(strconv.FormatInt(high, 10)+"\n"), 0o644)
	g := &Guard{Dir: cg}
	for _, c := range []struct {
		anon int64
		want bool
	}{{high / 2, false}, {high/16*AnonShare - 1, false}, {high/16*AnonShare + 4096, true}} {
		stat := "file 1000\nanon " + strconv.FormatInt(c.anon, 10) + "\nshmem 0\n"
		os.WriteFile(filepath.Join(cg, "memory.stat"), []byte(stat), 0o644)
		if got := g.anonFull(); got != c.want {
			t.Errorf("anon %d of high %d: anonFull %v, want %v", c.anon, high, got, c.want)
		}
	}
	os.Remove(filepath.Join(cg, "memory.stat"))
	if g.anonFull() {
		t.Error("no memory.stat: anonFull true")
	}
}
