package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A Start that asks to wait answers with the output up to the exit (or
// the first MiB of it), and with the summary once the exit is in; with
// stdin (the process may wait for the host) it waits for nothing.
func TestStartWaits(t *testing.T) {
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler))
	ctx := context.Background()

	r, err := e.Start(ctx, &agentv1.StartRequest{Shell: "printf one; sleep 0.2; printf two; exit 3", WaitMs: 30000, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	if out := r.Output; out == nil || !out.Exited || out.ExitCode != 3 || outputOf(out) != "onetwo" {
		t.Fatalf("output %v, want all of it and the exit", out)
	}

	// More than one answer holds: the first MiB, then Reads for the rest.
	const size = 3_000_000
	r, err = e.Start(ctx, &agentv1.StartRequest{Shell: fmt.Sprintf("head -c %d /dev/zero", size), WaitMs: 30000, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	out, total := r.Output, 0
	if out == nil || out.Exited || len(outputOf(out)) != maxReadBytes || r.Summary != nil {
		t.Fatalf("3 MB: first answer exited %v with %d bytes, want %d and no exit", out.GetExited(), len(outputOf(out)), maxReadBytes)
	}
	for total += len(outputOf(out)); !out.Exited; total += len(outputOf(out)) {
		if out, err = e.Read(ctx, &agentv1.ReadOutputRequest{Id: r.Id, Offset: out.NextOffset, WaitMs: 30000}); err != nil {
			t.Fatal(err)
		}
	}
	if total != size {
		t.Errorf("3 MB: read %d bytes, want %d", total, size)
	}

	r, err = e.Start(ctx, &agentv1.StartRequest{Argv: []string{"true"}, WaitMs: 30000, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output == nil || !r.Output.Exited || r.Output.ExitCode != 0 || len(r.Output.Chunks) != 0 {
		t.Fatalf("true: output %v, want the exit and nothing else", r.Output)
	}
	if r.Summary == nil || !r.Summary.Exited || r.Summary.EndedUnixNano == 0 {
		t.Errorf("true: summary %v, want the exited session's", r.Summary)
	}

	r, err = e.Start(ctx, &agentv1.StartRequest{Argv: []string{"true"}, WaitMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output == nil || !r.Output.Exited || r.Summary != nil {
		t.Errorf("no summary asked: output %v summary %v, want the exit only", r.Output, r.Summary)
	}

	r, err = e.Start(ctx, &agentv1.StartRequest{Argv: []string{"cat"}, Stdin: true, WaitMs: 30000, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output != nil || r.Summary != nil {
		t.Errorf("with stdin: output %v summary %v, want no wait", r.Output, r.Summary)
	}
	if _, err := e.WriteStdin(ctx, &agentv1.WriteStdinRequest{Id: r.Id, Close: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Summary(ctx, &agentv1.SummaryRequest{Id: r.Id, WaitMs: 30000}); err != nil {
		t.Fatal(err)
	}
}

func outputOf(r *agentv1.ReadOutputResponse) string {
	var b strings.Builder
	for _, c := range r.GetChunks() {
		b.Write(c.Data)
	}
	return b.String()
}

// The host may name a session: the name is used, one in use or malformed
// is refused.
func TestStartWithTheHostsID(t *testing.T) {
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	r, err := e.Start(ctx, &agentv1.StartRequest{Id: "host-chosen_1", Argv: []string{"true"}, WaitMs: 30000})
	if err != nil || r.Id != "host-chosen_1" {
		t.Fatalf("start: id %q, %v; want the host's", r.GetId(), err)
	}
	for _, id := range []string{"host-chosen_1", "a/b", "x y", strings.Repeat("a", 65)} {
		if _, err := e.Start(ctx, &agentv1.StartRequest{Id: id, Argv: []string{"true"}}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("id %q: %v, want InvalidArgument", id, err)
		}
	}
	if _, err := e.Start(ctx, &agentv1.StartRequest{Id: "fresh", Argv: []string{"/no/such/command"}}); err == nil {
		t.Fatal("a command that does not exist started")
	}
	if r, err := e.Start(ctx, &agentv1.StartRequest{Id: "fresh", Argv: []string{"true"}}); err != nil || r.Id != "fresh" {
		t.Errorf("the id of a start that failed: %q, %v; want it free again", r.GetId(), err)
	}
}

// A session started with forget is gone once the answer holds its exit: the
// host's warm-up runs leave nothing for List or Read. One that has not exited
// by the answer stays, and so does every other session.
func TestStartForgets(t *testing.T) {
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	kept, err := e.Start(ctx, &agentv1.StartRequest{Argv: []string{"true"}, WaitMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Start(ctx, &agentv1.StartRequest{Id: "warm-up", Argv: []string{"true"}, WaitMs: 30000, Summary: true, Forget: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output == nil || !r.Output.Exited || r.Summary == nil {
		t.Fatalf("forget: output %v summary %v, want the exit and its summary still", r.Output, r.Summary)
	}
	if _, err := e.Read(ctx, &agentv1.ReadOutputRequest{Id: "warm-up"}); status.Code(err) != codes.NotFound {
		t.Errorf("read of a forgotten session: %v, want NotFound", err)
	}
	slow, err := e.Start(ctx, &agentv1.StartRequest{Shell: "sleep 0.3", WaitMs: 1, Forget: true})
	if err != nil {
		t.Fatal(err)
	}
	if slow.Output == nil || slow.Output.Exited {
		t.Fatalf("sleep: output %v, want no exit in 1 ms", slow.Output)
	}
	list, err := e.List(ctx, &agentv1.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range list.Sessions {
		ids = append(ids, s.Id)
	}
	if len(ids) != 2 || ids[0] != kept.Id || ids[1] != slow.Id {
		t.Errorf("sessions %v, want [%s %s]: the forgotten one gone, the running one kept", ids, kept.Id, slow.Id)
	}
	// The forgotten id is free again.
	if _, err := e.Start(ctx, &agentv1.StartRequest{Id: "warm-up", Argv: []string{"true"}, WaitMs: 30000}); err != nil {
		t.Errorf("the id of a forgotten session: %v, want it free", err)
	}
}
