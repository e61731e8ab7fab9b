package agentclient_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/guestinit/agent"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// newPair serves a real agent on a unix socket, and its file streams on
// another, and returns a client of it.
func newPair(t *testing.T) *agentclient.Client { return newPairWith(t, true) }

// newPairWith is newPair; without streams the agent refuses file streams
// as one older than them does, and the client falls back to chunk calls.
func newPairWith(t *testing.T, streams bool) *agentclient.Client {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer(agent.ServerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	files := agent.NewFiles()
	agent.Register(srv, agent.NewExec(agent.WaitSpawner{}, log), files, agent.NewSystem(time.Now()))
	go srv.Serve(context.Background(), l)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fsock := filepath.Join(dir, "files.sock")
	fl, err := net.Listen("unix", fsock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); files.ServeStreams(fl) }()
	dial := func(ctx context.Context) (net.Conn, error) {
		if !streams {
			return nil, fmt.Errorf("%w: port 1027", channel.ErrRefused)
		}
		var d net.Dialer
		return d.DialContext(ctx, "unix", fsock)
	}
	c := agentclient.New(conn, agentclient.WithFileStreams(dial))
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		fl.Close()
		<-served
	})
	return c
}

func run(t *testing.T, c *agentclient.Client, cmd agentclient.Command) (string, string, agentclient.Exit) {
	t.Helper()
	ctx := context.Background()
	id, err := c.Start(ctx, cmd)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	var out, errb bytes.Buffer
	exit, err := c.Follow(ctx, id, 0, func(o agentclient.Output) error {
		if o.Stderr {
			errb.Write(o.Data)
		} else {
			out.Write(o.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	return out.String(), errb.String(), exit
}

func TestExecOutputAndExitCodes(t *testing.T) {
	c := newPair(t)
	tests := []struct {
		name   string
		cmd    agentclient.Command
		stdout string
		stderr string
		code   int
	}{
		{"echo", agentclient.Command{Argv: []string{"echo", "hi"}}, "hi\n", "", 0},
		{"exit 3", agentclient.Command{Shell: "echo out; echo err >&2; exit 3"}, "out\n", "err\n", 3},
		{"env and cwd", agentclient.Command{Shell: "echo $FOO; pwd", Env: map[string]string{"FOO": "bar"}, Cwd: "/tmp"}, "bar\n/tmp\n", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, exit := run(t, c, tc.cmd)
			if out != tc.stdout || errs != tc.stderr || exit.Code != tc.code {
				t.Errorf("got (%q, %q, %d), want (%q, %q, %d)", out, errs, exit.Code, tc.stdout, tc.stderr, tc.code)
			}
		})
	}
}

func TestExecMissingBinary(t *testing.T) {
	c := newPair(t)
	_, err := c.Start(context.Background(), agentclient.Command{Argv: []string{"/no/such/binary"}})
	if !errors.Is(err, agentclient.ErrStart) {
		t.Fatalf("got %v, want ErrStart", err)
	}
	if out, _, _ := run(t, c, agentclient.Command{Argv: []string{"echo", "still fine"}}); out != "still fine\n" {
		t.Errorf("got %q after a failed start", out)
	}
}

func TestExecStdinAndSignal(t *testing.T) {
	c := newPair(t)
	ctx := context.Background()
	id, err := c.Start(ctx, agentclient.Command{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteStdin(ctx, id, []byte("piped\n"), true); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := c.Follow(ctx, id, 0, func(o agentclient.Output) error { out.Write(o.Data); return nil }); err != nil {
		t.Fatal(err)
	}
	if out.String() != "piped\n" {
		t.Errorf("got %q, want %q", out.String(), "piped\n")
	}
	id, err = c.Start(ctx, agentclient.Command{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(ctx, id, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit, err := c.Follow(ctx, id, 0, func(agentclient.Output) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != -1 || exit.Signal != "SIGTERM" {
		t.Errorf("got %+v, want killed by SIGTERM", exit)
	}
}

// TestExecSlowReaderLosesNothing checks that output larger than the guest's
// log arrives whole and in order when the reader is slower than the writer.
func TestExecSlowReaderLosesNothing(t *testing.T) {
	c := newPair(t)
	ctx := context.Background()
	id, err := c.Start(ctx, agentclient.Command{Shell: "seq 1 2000000"})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	var n int64
	var next uint64
	stalled := false
	_, err = c.Follow(ctx, id, 0, func(o agentclient.Output) error {
		if o.Offset != next {
			t.Fatalf("offset %d, want %d", o.Offset, next)
		}
		next += uint64(len(o.Data))
		h.Write(o.Data)
		n += int64(len(o.Data))
		if !stalled {
			// The reader falls behind until the writer has filled the log
			// and waits for it (within the reader's lease).
			waitfor.Blocked(t, "agent.(*outputLog).append")
			stalled = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 1; i <= 2000000; i++ {
		want.WriteString(itoa(i))
		want.WriteByte('\n')
	}
	if n != int64(want.Len()) || !bytes.Equal(h.Sum(nil), sha(want.Bytes())) {
		t.Errorf("got %d bytes, want %d with the same sha256", n, want.Len())
	}
}

func itoa(i int) string {
	var b [20]byte
	p := len(b)
	for ; i > 0; i /= 10 {
		p--
		b[p] = byte('0' + i%10)
	}
	return string(b[p:])
}

func sha(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// TestFilesRoundTripAndErrors: files written and read back whole, on file
// streams and on the chunk calls of an agent without them, and each
// error with its meaning.
func TestFilesRoundTripAndErrors(t *testing.T) {
	t.Run("streams", func(t *testing.T) { filesRoundTrip(t, newPair(t)) })
	t.Run("chunks", func(t *testing.T) { filesRoundTrip(t, newPairWith(t, false)) })
}

func filesRoundTrip(t *testing.T, c *agentclient.Client) {
	ctx := context.Background()
	dir := t.TempDir()
	data := make([]byte, 5<<20+123)
	rand.Read(data)
	path := filepath.Join(dir, "sub", "f.bin")
	if err := c.Mkdir(ctx, filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.WriteFile(ctx, path, 0o600, bytes.NewReader(data)); err != nil || n != int64(len(data)) {
		t.Fatalf("write: %d, %v", n, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v, mode %v", err, fi.Mode())
	}
	r, info, err := c.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) || info.Size != int64(len(data)) {
		t.Fatalf("read back %d bytes (info %d), err %v", len(got), info.Size, err)
	}
	ents, err := c.List(ctx, filepath.Dir(path))
	if err != nil || len(ents) != 1 || ents[0].Name != "f.bin" {
		t.Fatalf("list: %v %+v", err, ents)
	}
	if err := c.Rename(ctx, path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	errCases := []struct {
		name string
		do   func() error
		want error
	}{
		{"missing", func() error { _, _, err := c.Open(ctx, path); return err }, fs.ErrNotExist},
		{"directory", func() error { _, _, err := c.Open(ctx, dir); return err }, syscall.EISDIR},
		{"stat missing", func() error { _, err := c.Stat(ctx, path); return err }, fs.ErrNotExist},
		{"relative", func() error { _, err := c.Stat(ctx, "etc/passwd"); return err }, agentclient.ErrInvalid},
		{"dotdot", func() error { _, err := c.Stat(ctx, "/tmp/../etc"); return err }, agentclient.ErrInvalid},
		{"remove non-empty", func() error { return c.Remove(ctx, filepath.Dir(path), false) }, syscall.ENOTEMPTY},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	if err := c.Remove(ctx, filepath.Dir(path), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v after recursive remove", err)
	}
}

func TestFilesFailedWriteKeepsOldFile(t *testing.T) {
	t.Run("streams", func(t *testing.T) { failedWriteKeepsOld(t, newPair(t)) })
	t.Run("chunks", func(t *testing.T) { failedWriteKeepsOld(t, newPairWith(t, false)) })
}

func failedWriteKeepsOld(t *testing.T, c *agentclient.Client) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keep")
	os.WriteFile(path, []byte("old"), 0o644)
	_, err := c.WriteFile(ctx, path, 0o644, io.MultiReader(strings.NewReader("partial"), errReader{}))
	if err == nil {
		t.Fatal("write succeeded with a failing source")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("got %q, want the old content", b)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source broke") }

func TestFilesSymlink(t *testing.T) {
	c := newPair(t)
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "l")
	if err := os.WriteFile(p, []byte("file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Symlink(ctx, "/etc/hostname", p); err != nil {
		t.Fatalf("symlink over a file: %v", err)
	}
	if got, err := c.Readlink(ctx, p); err != nil || got != "/etc/hostname" {
		t.Errorf("readlink: %q, %v", got, err)
	}
	if err := c.Symlink(ctx, "x", dir); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("symlink over a directory: %v, want EISDIR", err)
	}
	if err := c.Symlink(ctx, "x", "relative"); !errors.Is(err, agentclient.ErrInvalid) {
		t.Errorf("relative path: %v, want ErrInvalid", err)
	}
	if _, err := c.Readlink(ctx, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readlink missing: %v", err)
	}
}
