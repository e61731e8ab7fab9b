package commands

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/store"
)

// newTenantCLIEnv is newCLIEnv with a store of projects and keys; its
// testKey is the bootstrap admin key, kept in dataDir's key file.
func newTenantCLIEnv(t *testing.T) (*cliEnv, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := auth.Bootstrap(ctx, st, dir, testKey); err != nil {
		t.Fatal(err)
	}
	m := apitest.NewManager()
	srv := httptest.NewServer(api.New(api.Options{Manager: m, Auth: auth.New(st), Tenancy: st,
		RotateKey: func(ctx context.Context) (string, error) { return auth.Rotate(ctx, st, dir) }}))
	t.Cleanup(srv.Close)
	return &cliEnv{m: m, url: srv.URL}, dir
}

func TestKeyAndProjectCommands(t *testing.T) {
	env, dir := newTenantCLIEnv(t)
	ctx := context.Background()
	if got := env.run(t, ctx, "", "project", "create", "alpha"); got.code != 0 || got.stdout != "alpha\n" {
		t.Fatalf("project create: %+v", got)
	}
	if got := env.run(t, ctx, "", "project", "ls"); got.code != 0 || !strings.Contains(got.stdout, "alpha") || !strings.Contains(got.stdout, "default") {
		t.Errorf("project ls: %+v", got)
	}
	got := env.run(t, ctx, "", "key", "create", "--project", "alpha", "--expires", "1h", "ci")
	secret := strings.TrimSpace(got.stdout)
	if got.code != 0 || !strings.HasPrefix(secret, auth.KeyPrefix) || !strings.Contains(got.stderr, "member of project alpha") {
		t.Fatalf("key create: %+v", got)
	}
	got = env.run(t, ctx, "", "key", "ls", "--project", "alpha")
	if got.code != 0 || !strings.Contains(got.stdout, "ab_"+auth.VisiblePrefix(secret)+"…") || strings.Contains(got.stdout, secret) {
		t.Fatalf("key ls: %+v", got)
	}
	id := strings.Fields(strings.Split(got.stdout, "\n")[1])[0]
	member := func(args ...string) result {
		return env.runKey(t, secret, args...)
	}
	if got := member("ls"); got.code != 0 {
		t.Errorf("the member lists its sandboxes: %+v", got)
	}
	if got := member("key", "create"); got.code == 0 || !strings.Contains(got.stderr, "forbidden") {
		t.Errorf("a member makes a key: %+v", got)
	}
	if got := env.run(t, ctx, "", "key", "revoke", id); got.code != 0 || got.stdout != id+"\n" {
		t.Fatalf("key revoke: %+v", got)
	}
	if got := member("ls"); got.code == 0 || !strings.Contains(got.stderr, "unauthorized") {
		t.Errorf("the revoked key: %+v", got)
	}

	got = env.run(t, ctx, "", "key", "rotate")
	rotated := strings.TrimSpace(got.stdout)
	if got.code != 0 || !strings.HasPrefix(rotated, auth.KeyPrefix) {
		t.Fatalf("key rotate: %+v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, auth.KeyFile)); strings.TrimSpace(string(b)) != rotated {
		t.Errorf("key file after rotate: got %q, want the new key", b)
	}
	if got := env.run(t, ctx, "", "ls"); got.code == 0 {
		t.Errorf("the old bootstrap key after rotate: %+v, want refused", got)
	}
	if got := env.runKey(t, rotated, "key", "ls"); got.code != 0 {
		t.Errorf("the rotated key: %+v", got)
	}
}

// runKey runs the CLI against env with key.
func (e *cliEnv) runKey(t *testing.T, key string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"agentbox", "--url", e.url, "--api-key", key}, args...)
	code := Run(context.Background(), full, IO{In: strings.NewReader(""), Out: &out, Err: &errb})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}
