package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// A host of 4096 MiB and 2 CPUs at 2x memory and 4 vCPUs per CPU.
func testCapacity(used *[2]int, availMiB int) *capacity {
	c := newCapacity(Options{MemoryOvercommit: 2, VCPUOvercommit: 4, MemoryReserveMiB: 512},
		func(context.Context) (int, int, error) { return used[0], used[1], nil })
	c.hostMem = func() (int, int, error) { return 4096, availMiB, nil }
	c.cpus = 2
	return c
}

// Admission refuses, naming the limit, a guest larger than the host, one
// past the committed memory or vCPUs, and one that would eat the reserve
// (issue 38, finding 4).
func TestCapacityAdmission(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name       string
		used       [2]int // committed vCPUs, MiB
		avail      int
		vcpus, mem int
		want       string // "" admits
	}{
		{"fits", [2]int{0, 0}, 4000, 1, 512, ""},
		{"larger than the host", [2]int{0, 0}, 4000, 1, 8192, "more than the host's 4096 MiB"},
		{"more vcpus than the host", [2]int{0, 0}, 4000, 4, 512, "more than the host's 2 CPUs"},
		{"memory overcommitted", [2]int{1, 7900}, 4000, 1, 512, "memory overcommit 2"},
		{"vcpus overcommitted", [2]int{8, 512}, 4000, 1, 512, "vCPU overcommit 4"},
		{"reserve", [2]int{0, 0}, 900, 1, 512, "reserve of 512 MiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testCapacity(&tc.used, tc.avail)
			release, err := c.admit(ctx, tc.vcpus, tc.mem)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want admitted", err)
				}
				release()
				return
			}
			if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrCapacity naming %q", err, tc.want)
			}
		})
	}
}

// Concurrent admissions count each other before any is recorded: six
// concurrent 2 GiB creates on a host that holds four are not all let in.
func TestCapacityCountsPending(t *testing.T) {
	var used [2]int
	c := testCapacity(&used, 4000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 6 {
		wg.Go(func() {
			if _, err := c.admit(context.Background(), 1, 2048); err == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 4 {
		t.Errorf("admitted %d of 6 concurrent 2048 MiB creates, want 4 (8192 MiB at 2x of 4096)", admitted)
	}
}

// A create over the host's capacity is refused before anything is made.
func TestCreateOverCapacity(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MemoryOvercommit = 0.001 })
	if _, err := e.m.Create(context.Background(), CreateOptions{}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("got %v, want ErrCapacity", err)
	}
	if n := e.d.Starts() + e.d.Restores(); n != 0 {
		t.Errorf("%d VMs made for a refused create, want 0", n)
	}
}

// Every VMM's cgroup has a memory cap: its host_memory_mib, or one sized
// from its guest memory.
func TestHostMemoryCap(t *testing.T) {
	for _, tc := range []struct{ limit, guest, want int }{{0, 512, 2176}, {0, 2048, 4096}, {4096, 512, 4096}} {
		if got := hostMemoryCap(tc.limit, tc.guest); got != tc.want {
			t.Errorf("hostMemoryCap(%d, %d) = %d, want %d", tc.limit, tc.guest, got, tc.want)
		}
	}
}

// A host's cap on sandboxes (a fleet host's --fleet-max-sandboxes) counts
// the recorded ones and the admissions in flight.
func TestCapacityMaxSandboxes(t *testing.T) {
	var used [2]int
	c := testCapacity(&used, 4000)
	c.maxSandboxes = 3
	recorded := 1
	c.count = func(context.Context) (int, error) { return recorded, nil }
	ctx := context.Background()
	r1, err := c.admit(ctx, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.admit(ctx, 1, 64); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admit(ctx, 1, 64); !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "max sandboxes 3") {
		t.Fatalf("past the cap: %v", err)
	}
	r1()
	if _, err := c.admit(ctx, 1, 64); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}
