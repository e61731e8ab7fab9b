package placement_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/fleet/placement"
	"github.com/agentbox/agentbox/fleet/store"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func host(name string, memMiB, usedMiB int64, warm ...string) store.Host {
	return store.Host{Name: name, State: store.HostLive, Admin: store.AdminActive, LeaseUntil: now.Add(10 * time.Second),
		Capacity: store.Capacity{MemMiB: memMiB, VCPUs: 64, Warm: warm}, UsedMemMiB: usedMiB}
}

func rng() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func TestChooseSkipsHostsThatCannotTakeWork(t *testing.T) {
	dead := host("dead", 8192, 0)
	dead.State = store.HostDead
	lapsed := host("lapsed", 8192, 0)
	lapsed.LeaseUntil = now.Add(-time.Second)
	cordoned := host("cordoned", 8192, 0)
	cordoned.Admin = store.AdminCordoned
	full := host("full", 8192, 8000)
	capped := host("capped", 8192, 0)
	capped.MaxSandboxes, capped.UsedSandboxes = 2, 2
	fewCPUs := host("fewcpus", 8192, 0)
	fewCPUs.UsedVCPUs = 64
	ok := host("ok", 1024, 0)
	got := placement.Choose([]store.Host{dead, lapsed, cordoned, full, capped, fewCPUs, ok},
		store.Need{Count: 1, MemoryMiB: 512, VCPUs: 1}, 3, rng(), now)
	if !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("candidates %v, want [ok]", got)
	}
	if got := placement.Choose([]store.Host{ok}, store.Need{Count: 3, MemoryMiB: 512, VCPUs: 1}, 3, rng(), now); len(got) != 0 {
		t.Fatalf("3×512 MiB fits in 1024 MiB? %v", got)
	}
}

func TestChoosePrefersWarmThenTemplateThenMostFree(t *testing.T) {
	tmpl := host("tmpl", 2048, 0)
	tmpl.Templates = []string{"py"}
	hosts := []store.Host{host("big", 65536, 0), tmpl, host("warm", 4096, 3000, "py"), host("mid", 16384, 0)}
	got := placement.Choose(hosts, store.Need{Count: 1, MemoryMiB: 256, VCPUs: 1, Template: "py"}, len(hosts), rng(), now)
	if want := []string{"warm", "tmpl", "big", "mid"}; !slices.Equal(got, want) {
		t.Fatalf("candidates %v, want %v", got, want)
	}
	// Another template: most free memory first (K covers every host).
	got = placement.Choose(hosts, store.Need{Count: 1, MemoryMiB: 256, VCPUs: 1, Template: "go"}, len(hosts), rng(), now)
	if want := []string{"big", "mid", "tmpl", "warm"}; !slices.Equal(got, want) {
		t.Fatalf("candidates %v, want %v", got, want)
	}
}

func TestChooseBestOfKSpreadsAndKeepsEveryFallback(t *testing.T) {
	var hosts []store.Host
	for i := range 20 {
		hosts = append(hosts, host(string(rune('a'+i)), int64(1024*(i+1)), 0))
	}
	r := rng()
	first := map[string]int{}
	for range 500 {
		got := placement.Choose(slices.Clone(hosts), store.Need{Count: 1, MemoryMiB: 256, VCPUs: 1}, 2, r, now)
		if len(got) != len(hosts) {
			t.Fatalf("%d candidates, want all %d as fallbacks", len(got), len(hosts))
		}
		first[got[0]]++
	}
	// Best of 2 never picks the host with the least free memory first, and
	// does not always pick the one with the most.
	if first["a"] != 0 || len(first) < 5 {
		t.Fatalf("first choices %v", first)
	}
}

func TestChooseForkPrefersParentsHostWhileItFits(t *testing.T) {
	hosts := []store.Host{host("big", 65536, 0), host("parent", 2048, 1024)}
	need := store.Need{Count: 1, MemoryMiB: 512, VCPUs: 1, Parent: "sb-1"}
	if got := placement.ChooseFork(hosts, need, "parent", 3, rng(), now); got[0] != "parent" || len(got) != 2 {
		t.Fatalf("fork candidates %v", got)
	}
	need.Count = 3 // 1536 MiB: no longer fits beside the parent
	if got := placement.ChooseFork(hosts, need, "parent", 3, rng(), now); !slices.Equal(got, []string{"big"}) {
		t.Fatalf("fork candidates %v", got)
	}
}
