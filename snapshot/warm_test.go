package snapshot_test

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// The warm-up runs every command the guest has, skips one it lacks (an
// image without a shell, say), and leaves no session behind.
func TestWarmExecs(t *testing.T) {
	ctx := context.Background()
	vm, err := vmmtest.NewFakeDriver(vmmtest.FakeOptions{}).Start(ctx, vmmtest.FakeConfig(t, "sb-warm", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vm.Stop(context.Background()) })
	conn, err := vm.Dial(ctx, channel.AgentPort)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(conn)
	t.Cleanup(func() { c.Close() })
	runs := [][]string{{"/no/such/binary"}, {"true"}, {"sh", "-c", "exit 3"}}
	if err := snapshot.WarmExecs(ctx, c, true, runs); err != nil {
		t.Fatalf("warm-up: %v, want the missing binary skipped", err)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("sessions after the warm-up: %v, %v; want none", list, err)
	}
	// A guest that does not answer fails it.
	c.Close()
	if err := snapshot.WarmExecs(ctx, c, true, snapshot.WarmRuns); err == nil {
		t.Error("warm-up over a closed channel: no error")
	}
}
