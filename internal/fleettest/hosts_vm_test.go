//go:build vm

package fleettest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/fleettest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fleettest.RemoveBinaries()
	os.Exit(code)
}

// hostsUnderTest is how many plain hostds TestHostsBootVMsWithoutColliding
// starts (AGENTBOX_FLEETTEST_HOSTS; default 2, to spare the machine's
// emulated CPUs).
func hostsUnderTest() int {
	if n, err := strconv.Atoi(os.Getenv("AGENTBOX_FLEETTEST_HOSTS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// TestHostsBootVMsWithoutColliding runs several real hostds (not in fleet
// mode) on one machine, each in its own namespace with its own address and
// data directory, each booting a VM: none disturbs another. Killing one
// host kills its VMMs only; it starts again on the same data and address;
// Close leaves no process, namespace or link.
func TestHostsBootVMsWithoutColliding(t *testing.T) {
	n := hostsUnderTest()
	f := fleettest.New(t, fleettest.Options{Hosts: n})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	clients := make([]*client.Client, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		c, err := client.New(f.HostURL(i), f.HostKey())
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		wg.Go(func() {
			sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
			ids[i], errs[i] = sb.ID, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: create: %v", i, err)
		}
	}
	vmms := make([][]int, n)
	for i := range n {
		r, err := clients[i].Exec(ctx, ids[i], client.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf("echo host-%d", i)}})
		if err != nil || r.Stdout != fmt.Sprintf("host-%d\n", i) {
			t.Fatalf("host %d: exec: %+v %v", i, r, err)
		}
		list, err := clients[i].ListSandboxes(ctx)
		if err != nil || len(list) != 1 || list[0].ID != ids[i] {
			t.Fatalf("host %d lists %+v (%v), want only its own %s", i, list, err, ids[i])
		}
		vmms[i] = f.VMMPIDs(i)
		if len(vmms[i]) == 0 {
			t.Fatalf("host %d: no VMM process found", i)
		}
		for j := range i {
			for _, pid := range vmms[i] {
				if slices.Contains(vmms[j], pid) {
					t.Fatalf("pid %d counted as a VMM of hosts %d and %d", pid, j, i)
				}
			}
		}
	}
	// kill -9 host 0 and its VMMs: the others run on.
	if err := f.KillHost(0); err != nil {
		t.Fatal(err)
	}
	for _, pid := range vmms[0] {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Errorf("VMM pid %d of the killed host is alive", pid)
		}
	}
	for i := 1; i < n; i++ {
		if r, err := clients[i].Exec(ctx, ids[i], client.ExecRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("host %d after host 0 was killed: %+v %v", i, r, err)
		}
	}
	if err := f.StartHost(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[0].Health(ctx); err != nil {
		t.Fatalf("host 0 back at %s: %v", f.HostURL(0), err)
	}
	pids := f.PIDs()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Errorf("pid %d outlived Close", pid)
		}
	}
	for i := range n {
		if _, err := os.Stat("/run/netns/" + f.HostNetns(i)); err == nil {
			t.Errorf("namespace %s outlived Close", f.HostNetns(i))
		}
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "agentbox-") {
			t.Logf("note: sandbox namespace %s exists (another test's?)", e.Name())
		}
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && len(b) > i+2 && b[i+2] == 'Z'
}
