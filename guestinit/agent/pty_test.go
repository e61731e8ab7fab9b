package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// readAll follows session id to its exit and returns its output.
func readAll(t *testing.T, e *Exec, id string) (string, *agentv1.ReadOutputResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	var off uint64
	for {
		r, err := e.Read(ctx, &agentv1.ReadOutputRequest{Id: id, Offset: off, WaitMs: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Chunks {
			out.Write(c.Data)
		}
		off = r.NextOffset
		if r.Exited {
			return out.String(), r
		}
		if ctx.Err() != nil {
			t.Fatalf("no exit; output %q", out.String())
		}
	}
}

func TestPTYSession(t *testing.T) {
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	// The process reads a line, so the test resizes before it prints.
	st, err := e.Start(ctx, &agentv1.StartRequest{Shell: "tty >/dev/null && echo isatty; read x; stty size; exit 4", Tty: true, Rows: 33, Cols: 77})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Resize(ctx, &agentv1.ResizeRequest{Id: st.Id, Rows: 50, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WriteStdin(ctx, &agentv1.WriteStdinRequest{Id: st.Id, Data: []byte("go\n")}); err != nil {
		t.Fatal(err)
	}
	out, r := readAll(t, e, st.Id)
	if !strings.Contains(out, "isatty") || !strings.Contains(out, "50 120") || r.ExitCode != 4 {
		t.Errorf("got %q exit %d, want a terminal of 50x120, exit 4", out, r.ExitCode)
	}
	list, _ := e.List(ctx, &agentv1.Empty{})
	if len(list.Sessions) != 1 || !list.Sessions[0].Tty || list.Sessions[0].Running {
		t.Errorf("listed %+v", list.Sessions)
	}
	if _, err := e.Resize(ctx, &agentv1.ResizeRequest{Id: st.Id, Rows: 0, Cols: 1}); err == nil {
		t.Error("resize to 0 rows: no error")
	}
}

func TestResizeWithoutTerminal(t *testing.T) {
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler))
	st, err := e.Start(context.Background(), &agentv1.StartRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Resize(context.Background(), &agentv1.ResizeRequest{Id: st.Id, Rows: 10, Cols: 10}); err == nil {
		t.Error("resize of a session without a terminal: no error")
	}
}
