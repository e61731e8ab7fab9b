package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// userFiles writes a passwd and a group file and returns their directory.
func userFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// The user must reach its home: open the test's directories.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(dir, "home-app")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\napp:x:1234:1200::" + home + ":/bin/sh\n"
	group := "root:x:0:\napp:x:1200:\nstaff:x:1300:app,other\nwheel:x:1400:other\n"
	for name, data := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestResolveUser(t *testing.T) {
	etc := userFiles(t)
	tests := []struct {
		spec     string
		uid, gid uint32
		groups   []uint32
		name     string
		home     string
		root     bool
		err      bool
	}{
		{spec: "", root: true},
		{spec: "root", root: true},
		{spec: "0", root: true},
		{spec: "app", uid: 1234, gid: 1200, groups: []uint32{1300}, name: "app", home: filepath.Join(etc, "home-app")},
		{spec: "1234", uid: 1234, gid: 1200, groups: []uint32{1300}, name: "app", home: filepath.Join(etc, "home-app")},
		// An explicit group is the only one, as in Docker.
		{spec: "app:wheel", uid: 1234, gid: 1400, name: "app", home: filepath.Join(etc, "home-app")},
		{spec: "1234:77", uid: 1234, gid: 77, name: "app", home: filepath.Join(etc, "home-app")},
		// A uid passwd does not know: gid 0 and HOME /, as Docker does.
		{spec: "5000", uid: 5000, gid: 0, home: "/"},
		{spec: "5000:5001", uid: 5000, gid: 5001, home: "/"},
		{spec: "nobody-here", err: true},
		{spec: "app:nogroup", err: true},
		{spec: "a:b:c", err: true},
		{spec: "app\n", err: true},
		{spec: strings.Repeat("a", maxUserSpec+1), err: true},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			u, err := resolveUser(tc.spec, etc)
			switch {
			case tc.err:
				if err == nil {
					t.Fatalf("got %+v, want an error", u)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.root:
				if u.cred != nil || u.home != "/root" {
					t.Fatalf("got %+v, want root", u)
				}
				return
			}
			if u.cred == nil || u.cred.Uid != tc.uid || u.cred.Gid != tc.gid || !slices.Equal(u.cred.Groups, tc.groups) {
				t.Fatalf("got cred %+v, want %d:%d %v", u.cred, tc.uid, tc.gid, tc.groups)
			}
			if u.name != tc.name || u.home != tc.home {
				t.Fatalf("got name %q home %q, want %q %q", u.name, u.home, tc.name, tc.home)
			}
		})
	}
	// Without passwd and group files (a distroless or scratch image):
	// root and numeric users still work, names do not.
	empty := t.TempDir()
	if u, err := resolveUser("root", empty); err != nil || u.cred != nil {
		t.Errorf("root without passwd: got %+v, %v", u, err)
	}
	if u, err := resolveUser("65532:65532", empty); err != nil || u.cred == nil || u.cred.Uid != 65532 || u.cred.Gid != 65532 {
		t.Errorf("65532:65532 without passwd: got %+v, %v", u, err)
	}
	if _, err := resolveUser("app", empty); err == nil {
		t.Error("a name without passwd: got no error")
	}
}

func TestStartAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change user")
	}
	etc := userFiles(t)
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler), UserFiles(etc))
	ctx := context.Background()
	script := `echo "$(id -u) $(id -g) $(id -G) $HOME $USER $(pwd)"`
	for _, tty := range []bool{false, true} {
		st, err := e.Start(ctx, &agentv1.StartRequest{Shell: script, User: "app", Tty: tty})
		if err != nil {
			t.Fatal(err)
		}
		out, r := readAll(t, e, st.Id)
		home := filepath.Join(etc, "home-app")
		want := "1234 1200 1200 1300 " + home + " app " + home
		if strings.TrimSpace(out) != want || r.ExitCode != 0 {
			t.Errorf("tty %v: got %q exit %d, want %q", tty, out, r.ExitCode, want)
		}
	}
	// The request's env and cwd win over the user's.
	st, err := e.Start(ctx, &agentv1.StartRequest{Shell: script, User: "5000", Env: map[string]string{"HOME": "/x"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := readAll(t, e, st.Id); strings.TrimSpace(out) != "5000 0 0 /x 5000 /" {
		t.Errorf("numeric user: got %q", out)
	}
	if _, err := e.Start(ctx, &agentv1.StartRequest{Argv: []string{"true"}, User: "nobody-here"}); err == nil {
		t.Error("an unknown user started")
	}
}
