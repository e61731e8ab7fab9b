//go:build vm

package qemu_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/internal/testwheel"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/qemu"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestGuestEvents boots a VM and checks the flight recorder: the file
// events of a command are all recorded, attributed to it, by the time its
// exit is seen (the flush guarantee), and a pip install is reported.
func TestGuestEvents(t *testing.T) {
	d, err := qemu.New(qemu.Options{Accel: vmm.AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	booted := time.Now()
	_, c := vmmtest.Boot(t, d, "events")
	t.Logf("booted to agent in %v", time.Since(booted).Round(time.Millisecond))
	ctx := context.Background()
	first, err := c.NextEvents(ctx, ^uint64(0), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.WatchError != "" {
		t.Fatalf("guest watch error: %s", first.WatchError)
	}

	t.Run("file ops are recorded before the exit", func(t *testing.T) {
		const script = "echo hi > /root/a.txt; mkdir /root/d; mv /root/a.txt /root/d/b.txt; rm /root/d/b.txt"
		id, code := runGuest(t, c, script)
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
		evs, err := c.NextEvents(ctx, first.Head, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs.Events {
			if e.File == nil || !strings.HasPrefix(e.File.Path, "/root/") {
				continue
			}
			got = append(got, fileLine(e))
			if e.ExecID != id {
				t.Errorf("event %d (%s): got exec id %q, want %q", e.Seq, fileLine(e), e.ExecID, id)
			}
		}
		want := []string{
			"created /root/a.txt",
			"created /root/d dir",
			"renamed /root/d/b.txt from /root/a.txt",
			"deleted /root/d/b.txt",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("got events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("pip install", func(t *testing.T) {
		head, err := c.NextEvents(ctx, ^uint64(0), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		const whl = "/root/demo-0.1-py3-none-any.whl"
		if _, err := c.WriteFile(ctx, whl, 0o644, bytes.NewReader(whlBytes(t))); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		id, code := runGuest(t, c, "pip install --no-index --break-system-packages "+whl)
		t.Logf("pip install took %v", time.Since(start).Round(time.Millisecond))
		if code != 0 {
			t.Fatalf("pip exit code %d", code)
		}
		var found bool
		n := 0
		for after := head.Head; ; {
			evs, err := c.NextEvents(ctx, after, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs.Events) == 0 {
				break
			}
			for _, e := range evs.Events {
				n++
				p := e.Package
				if p != nil && p.Manager == "pip" && p.Name == "demo" && p.Version == "0.1" && p.Action == "installed" {
					found = true
					if e.ExecID != id {
						t.Errorf("package event: got exec id %q, want %q", e.ExecID, id)
					}
				}
			}
			after = evs.Events[len(evs.Events)-1].Seq
		}
		t.Logf("pip install made %d events", n)
		if !found {
			t.Errorf("no pip installed demo 0.1 event among %d events", n)
		}
	})
}

// runGuest runs a shell command in the guest to its exit.
func runGuest(t *testing.T, c *agentclient.Client, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, err := c.Start(ctx, agentclient.Command{Shell: script})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	exit, err := c.Follow(ctx, id, 0, func(o agentclient.Output) error {
		out.Write(o.Data)
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if exit.Code != 0 {
		t.Logf("output of %q:\n%s", script, out.String())
	}
	return id, exit.Code
}

func fileLine(e agentclient.GuestEvent) string {
	s := e.File.Op + " " + e.File.Path
	if e.File.OldPath != "" {
		s += " from " + e.File.OldPath
	}
	if e.File.Dir {
		s += " dir"
	}
	return s
}

// whlBytes is demo-0.1-py3-none-any.whl: one empty module.
func whlBytes(t *testing.T) []byte {
	t.Helper()
	b, err := testwheel.Build("demo", "0.1", "")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
