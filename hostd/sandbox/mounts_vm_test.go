//go:build vm

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/internal/s3test"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// secretMap is a mounts.Secrets over a map.
type secretMap map[string]string

func (m secretMap) SecretValue(_ context.Context, name string) ([]byte, error) {
	v, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("secret %s: not found", name)
	}
	return []byte(v), nil
}

// One boot: a host directory mounted read-only and another read-write, and
// a bucket (an S3 server on loopback) read-only and read-write, read in the
// sandbox, in each of 3 forks and after a pause and resume; forks share the
// read-write directory and bucket (last writer wins); bad mounts are
// refused before anything is made.
func TestHostMounts(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	roots := t.TempDir()
	ro, rw := filepath.Join(roots, "ro"), filepath.Join(roots, "rw")
	for _, d := range []string{ro, rw} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "hello.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	s3 := s3test.Start(t, "bucket")
	s3.Put(t, "bucket", "in/readme.txt", []byte("from the bucket"))
	s3.Put(t, "bucket", "in/deep/x.txt", []byte("x"))
	secrets := secretMap{"s3keys": s3test.AccessKey + ":" + s3test.SecretKey, "wrong": "AKIDWRONG:nope"}
	m := newManager(t, data, func(o *sandbox.Options) {
		o.Mounts = mounts.Config{HostRoots: []string{roots}, Secrets: secrets}
	})
	ctx := context.Background()

	checkBadMounts(t, m, ro, data, s3.Endpoint)

	s3ro := mounts.Spec{Type: mounts.TypeS3, Endpoint: s3.Endpoint, Bucket: "bucket", Prefix: "in", Secret: "s3keys", Path: "/s3in", ReadOnly: true}
	s3rw := mounts.Spec{Type: mounts.TypeS3, Endpoint: s3.Endpoint, Bucket: "bucket", Prefix: "out/", Secret: "s3keys", Path: "/s3out"}
	info, err := m.Create(ctx, sandbox.CreateOptions{Mounts: []mounts.Spec{
		{Type: mounts.TypeHost, Source: ro, Path: "/data", ReadOnly: true},
		{Type: mounts.TypeHost, Source: rw, Path: "/work"},
		s3ro, s3rw,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	if got := sh(t, m, info.ID, "cat /data/hello.txt"); got != "from the host" {
		t.Fatalf("read in the sandbox: %q", got)
	}
	if got := sh(t, m, info.ID, "echo x > /data/new 2>&1; echo rc=$?"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("write to the read-only mount: %q", got)
	}
	sh(t, m, info.ID, "echo parent > /work/parent.txt")
	// No symlink a host program would follow: the mount does not allow them.
	if got := sh(t, m, info.ID, "ln -s /etc/passwd /work/x 2>&1; echo rc=$?"); !strings.Contains(got, "Operation not permitted") {
		t.Errorf("ln -s in the host mount: %q, want Operation not permitted", got)
	}
	checkS3Mount(t, m, s3, info.ID)
	if b, _ := os.ReadFile(filepath.Join(rw, "parent.txt")); string(b) != "parent\n" {
		t.Fatalf("host sees %q after the guest's write", b)
	}

	forks, err := m.Fork(ctx, info.ID, sandbox.ForkOptions{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range forks {
		defer m.Delete(ctx, f.ID)
		if got := sh(t, m, f.ID, "cat /data/hello.txt /work/parent.txt"); got != "from the hostparent\n" {
			t.Errorf("fork %d reads %q", i, got)
		}
	}
	// Shared semantics: a fork's write is the host's file, seen by the others.
	sh(t, m, forks[0].ID, "echo fork0 > /work/shared.txt")
	sh(t, m, forks[1].ID, "echo fork1 > /work/shared.txt")
	for _, id := range []string{forks[2].ID, info.ID} {
		if got := sh(t, m, id, "cat /work/shared.txt"); got != "fork1\n" {
			t.Errorf("%s reads %q, want the last writer's", id, got)
		}
	}
	// The bucket is shared too: a fork's upload is the object all see.
	sh(t, m, forks[2].ID, "echo from-fork2 > /s3out/fork.txt")
	if b, err := s3.Get("bucket", "out/fork.txt"); err != nil || string(b) != "from-fork2\n" {
		t.Errorf("the bucket after a fork's write: %q, %v", b, err)
	}
	if got := sh(t, m, info.ID, "cat /s3out/fork.txt /s3in/readme.txt"); got != "from-fork2\nfrom the bucket" {
		t.Errorf("the parent reads %q after the fork's write", got)
	}

	if _, err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "while-paused.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, m, info.ID, "cat /data/hello.txt /data/while-paused.txt"); got != "from the hostnew" {
		t.Errorf("after resume: %q", got)
	}
}

// checkBadMounts: each bad mount is a clear ErrInvalid, and leaves no
// sandbox record or directory.
func checkBadMounts(t *testing.T, m *sandbox.Manager, ok, data, s3 string) {
	ctx := context.Background()
	for _, sp := range []mounts.Spec{
		{Type: mounts.TypeHost, Source: "/etc", Path: "/data"},
		{Type: mounts.TypeHost, Source: ok + "/../../etc", Path: "/data"},
		{Type: mounts.TypeHost, Source: ok, Path: "/proc"},
		{Type: mounts.TypeHost, Source: ok, Path: "/sys/x"},
		{Type: mounts.TypeHost, Source: ok, Path: "/dev/x"},
		{Type: mounts.TypeHost, Source: ok, Path: "/run/agent"},
		{Type: mounts.TypeS3, Endpoint: s3, Bucket: "bucket", Secret: "no-such-secret", Path: "/s3"},
		{Type: mounts.TypeS3, Endpoint: s3, Bucket: "bucket", Secret: "wrong", Path: "/s3"},
		{Type: mounts.TypeS3, Endpoint: s3, Bucket: "no-such-bucket", Secret: "s3keys", Path: "/s3"},
	} {
		_, err := m.Create(ctx, sandbox.CreateOptions{Mounts: []mounts.Spec{sp}})
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("mount %+v: got %v, want ErrInvalid", sp, err)
		}
	}
	if list, _ := m.List(ctx); len(list) != 0 {
		t.Errorf("bad creates left %d sandboxes", len(list))
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "sandboxes")); len(ents) != 0 {
		t.Errorf("bad creates left %d sandbox dirs", len(ents))
	}
}

// checkS3Mount: the read-only bucket mount lists and reads; the read-write
// one uploads what the guest writes, on close.
func checkS3Mount(t *testing.T, m *sandbox.Manager, s3 *s3test.Server, id string) {
	if got := sh(t, m, id, "ls /s3in; cat /s3in/readme.txt /s3in/deep/x.txt"); got != "deep\nreadme.txt\nfrom the bucketx" {
		t.Errorf("ls and cat of the bucket: %q", got)
	}
	if got := sh(t, m, id, "echo x > /s3in/new 2>&1; echo rc=$?"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("write to the read-only bucket: %q", got)
	}
	sh(t, m, id, "mkdir -p /s3out/d && echo written in the guest > /s3out/d/w.txt && head -c 1048576 /dev/urandom > /s3out/big")
	if b, err := s3.Get("bucket", "out/d/w.txt"); err != nil || string(b) != "written in the guest\n" {
		t.Errorf("the bucket holds %q, %v after the guest's write", b, err)
	}
	if b, err := s3.Get("bucket", "out/big"); err != nil || len(b) != 1<<20 {
		t.Errorf("the bucket holds %d bytes of big, %v", len(b), err)
	}
	if got := sh(t, m, id, "wc -c < /s3out/big; ls /s3out"); got != "1048576\nbig\nd\n" {
		t.Errorf("the guest sees %q", got)
	}
}
