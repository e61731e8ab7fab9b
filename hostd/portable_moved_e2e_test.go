//go:build vm

package hostd_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// movedChecks is what TestPortablePause made on the first host to check
// on the host the sandbox moves to: a background exec's session and the
// output read of it, a service URL's token and public port, a share link.
type movedChecks struct {
	id     string
	execID string
	// seen is the exec's output read on the first host.
	seen  string
	token string
	share string
}

// errEnough stops an Attach once enough output was read.
var errEnough = errors.New("enough")

// movedWork starts, in sandbox id on host c (data dir data), a background
// exec that prints lines until /root/stop exists, reads some of its
// output, serves /srv/www on port 8000, makes port 8001 public and makes a
// share link of port 8000.
func movedWork(t *testing.T, c *client.Client, data, id string) movedChecks {
	t.Helper()
	ctx := context.Background()
	mc := movedChecks{id: id}
	var err error
	mc.execID, err = c.ExecBackground(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c",
		`i=0; while [ ! -e /root/stop ]; do i=$((i+1)); echo line$i; sleep 0.1; done; echo done`}})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err = c.Attach(ctx, id, mc.execID, 0, func(ev client.Event) error {
		if ev.Type == client.ExecEventTypeStdout {
			if int(ev.Offset) != out.Len() {
				t.Fatalf("output event at %d after %d bytes", ev.Offset, out.Len())
			}
			out.Write(ev.Data)
		}
		if strings.Contains(out.String(), "line3\n") {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("attach on the first host: %v (read %q)", err, out.String())
	}
	mc.seen = out.String()
	if _, err := c.ExecBackground(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c",
		"mkdir -p /srv/www && echo hello > /srv/www/hello.txt && exec python3 -m http.server 8000 --bind 127.0.0.1 --directory /srv/www"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPortPublic(ctx, id, 8001, true); err != nil {
		t.Fatal(err)
	}
	pa, err := c.PortAccess(ctx, id, 8000)
	if err != nil {
		t.Fatal(err)
	}
	mc.token = pa.Token
	waitfor.Cond(t, "the guest's web server to answer", func() bool {
		code, _ := serviceGet(t, data, id, "", mc.token)
		return code == http.StatusOK
	})
	l, err := c.ShareLink(ctx, id, 8000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mc.share = l.Token
	if code, body := serviceGet(t, data, id, mc.share, ""); code != http.StatusOK || body != "hello\n" {
		t.Fatalf("the share link on the first host: %d %q", code, body)
	}
	return mc
}

// check verifies, on host c (data dir data) that resumed the sandbox,
// that its exec session reads on from where the first host's read ended
// and ends with its exit, its token and public port are the same, and the
// share link made on the first host opens it.
func (mc movedChecks) check(t *testing.T, c *client.Client, data string) {
	t.Helper()
	ctx := context.Background()
	pa, err := c.PortAccess(ctx, mc.id, 8000)
	if err != nil || pa.Token != mc.token || pa.Public {
		t.Fatalf("port 8000 after the move: %+v %v, want token %q, not public", pa, err, mc.token)
	}
	if pub, err := c.PortAccess(ctx, mc.id, 8001); err != nil || !pub.Public {
		t.Fatalf("port 8001 after the move: %+v %v, want public", pub, err)
	}
	if code, _ := serviceGet(t, data, mc.id, "", ""); code != http.StatusUnauthorized {
		t.Fatalf("port 8000 without a credential after the move: %d, want 401", code)
	}
	if code, body := serviceGet(t, data, mc.id, "", mc.token); code != http.StatusOK || body != "hello\n" {
		t.Fatalf("the token after the move: %d %q", code, body)
	}
	if code, body := serviceGet(t, data, mc.id, mc.share, ""); code != http.StatusOK || body != "hello\n" {
		t.Fatalf("the first host's share link after the move: %d %q", code, body)
	}

	r, err := c.Exec(ctx, mc.id, client.ExecRequest{Cmd: []string{"touch", "/root/stop"}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("touch /root/stop: %+v %v", r, err)
	}
	from := len(mc.seen)
	var rest strings.Builder
	var exit *int
	first := -1
	err = c.Attach(ctx, mc.id, mc.execID, int64(from), func(ev client.Event) error {
		switch ev.Type {
		case client.ExecEventTypeStdout:
			if first < 0 {
				first = int(ev.Offset)
			}
			rest.Write(ev.Data)
		case client.ExecEventTypeExit:
			exit = ev.ExitCode
		}
		return nil
	})
	if err != nil || exit == nil || *exit != 0 {
		t.Fatalf("attach after the move: %v, exit %v", err, exit)
	}
	if first != from {
		t.Fatalf("attach at %d after the move read from %d", from, first)
	}
	all := mc.seen + rest.String()
	if !strings.HasSuffix(all, "\ndone\n") {
		t.Fatalf("the exec's output after the move does not end with done: ...%q", all[max(0, len(all)-80):])
	}
	for i, l := range strings.Split(strings.TrimSuffix(all, "\ndone\n"), "\n") {
		if want := "line" + itoa(i+1); l != want {
			t.Fatalf("output line %d is %q, want %q (first host read %d bytes)", i+1, l, want, from)
		}
	}
	// B's flight recorder took the exec over: its start (from A's
	// records) and its end.
	waitfor.Cond(t, "B's flight recorder to record the moved exec's end", func() bool {
		list, err := c.Events(ctx, mc.id, client.EventQuery{Types: []client.AuditEventType{client.AuditEventTypeExec}})
		if err != nil {
			t.Fatal(err)
		}
		var started, ended bool
		for _, ev := range list.Events {
			if ev.Exec == nil || ev.Exec.ExecID != mc.execID {
				continue
			}
			started = started || ev.Exec.Phase == client.ExecAuditPhaseStart
			ended = ended || ev.Exec.Phase == client.ExecAuditPhaseEnd && ev.Exec.ExitCode != nil && *ev.Exec.ExitCode == 0
		}
		return started && ended
	})
	t.Logf("after the move: the exec read on from byte %d to its exit (%d bytes more), token, public port and share link kept", from, rest.Len())
}

// serviceGet GETs hello.txt of sandbox id's port 8000 by its path-based
// service URL on the hostd of data dir data, with share link share (as
// ?token=) or token (in the token header), and returns the status and body.
func serviceGet(t *testing.T, data, id, share, token string) (int, string) {
	t.Helper()
	addr, err := os.ReadFile(filepath.Join(data, "addr"))
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + string(addr) + "/v1/sandboxes/" + id + "/ports/8000/hello.txt"
	if share != "" {
		u += "?token=" + url.QueryEscape(share)
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Agentbox-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b)
}
