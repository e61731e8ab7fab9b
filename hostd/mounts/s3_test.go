package mounts

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/s3test"
)

// secretMap is a Secrets over a map.
type secretMap map[string]string

func (m secretMap) SecretValue(_ context.Context, name string) ([]byte, error) {
	v, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("no secret %s", name)
	}
	return []byte(v), nil
}

func s3Config() Config {
	return Config{Secrets: secretMap{
		"s3":  s3test.AccessKey + ":" + s3test.SecretKey,
		"bad": "AKIDWRONG:nope",
		"odd": "no-colon",
	}}
}

// Bad s3 mounts are refused at validation: an unknown secret, a malformed
// one, credentials the bucket refuses, a missing bucket, a bad endpoint.
func TestS3Validate(t *testing.T) {
	srv := s3test.Start(t, "data")
	c := s3Config()
	ok := Spec{Type: TypeS3, Endpoint: srv.Endpoint, Bucket: "data", Secret: "s3", Path: "/data"}
	if _, err := c.Validate(t.Context(), []Spec{ok}); err != nil {
		t.Fatalf("good mount: %v", err)
	}
	for name, mut := range map[string]func(*Spec){
		"unknown secret":  func(s *Spec) { s.Secret = "missing" },
		"malformed":       func(s *Spec) { s.Secret = "odd" },
		"refused":         func(s *Spec) { s.Secret = "bad" },
		"no bucket":       func(s *Spec) { s.Bucket = "nope" },
		"endpoint path":   func(s *Spec) { s.Endpoint += "/x" },
		"endpoint scheme": func(s *Spec) { s.Endpoint = "ftp://127.0.0.1" },
		"no endpoint":     func(s *Spec) { s.Endpoint = "" },
		"dotdot prefix":   func(s *Spec) { s.Prefix = "a/../b" },
	} {
		sp := ok
		mut(&sp)
		if _, err := c.Validate(t.Context(), []Spec{sp}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := (Config{}).Validate(t.Context(), []Spec{ok}); !errors.Is(err, ErrInvalid) {
		t.Errorf("without secrets: %v", err)
	}
}

// The backend through the real protocol and kernel FUSE (the harness): a
// read-only mount lists prefixes as directories and streams reads; a
// read-write one uploads a written file on close, makes and removes
// directories, renames and truncates.
func TestFUSES3(t *testing.T) {
	srv := s3test.Start(t, "data")
	big := make([]byte, 3<<20+77)
	_, _ = rand.Read(big)
	srv.Put(t, "data", "pre/hello.txt", []byte("hello from the bucket\n"))
	srv.Put(t, "data", "pre/sub/a.txt", []byte("a"))
	srv.Put(t, "data", "pre/big.bin", big)
	srv.Put(t, "data", "outside.txt", []byte("not under the prefix"))
	g := t.TempDir()
	ro, rw := filepath.Join(g, "ro"), filepath.Join(g, "rw")
	base := Spec{Type: TypeS3, Endpoint: srv.Endpoint, Bucket: "data", Prefix: "pre", Secret: "s3"}
	roSpec, rwSpec := base, base
	roSpec.Path, roSpec.ReadOnly = ro, true
	rwSpec.Path, rwSpec.Prefix = rw, "pre/"
	h := newHarnessWith(t, s3Config(), []Spec{roSpec, rwSpec})
	h.connect()

	ents, err := os.ReadDir(ro)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, fmt.Sprintf("%s:%v", e.Name(), e.IsDir()))
	}
	if want := []string{"big.bin:false", "hello.txt:false", "sub:true"}; !slices.Equal(names, want) {
		t.Errorf("ls: %v, want %v", names, want)
	}
	if b, err := os.ReadFile(filepath.Join(ro, "hello.txt")); err != nil || string(b) != "hello from the bucket\n" {
		t.Errorf("cat: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(ro, "big.bin")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("big read: %d bytes, %v", len(b), err)
	}
	if _, err := os.Stat(filepath.Join(ro, "outside.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key outside the prefix: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ro, "x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only mount: %v", err)
	}

	// Writes: uploaded on close.
	if err := os.WriteFile(filepath.Join(rw, "new.bin"), big[:1<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := srv.Get("data", "pre/new.bin"); err != nil || !bytes.Equal(b, big[:1<<20]) {
		t.Fatalf("bucket holds %d bytes, %v; want the 1 MiB written", len(b), err)
	}
	if err := os.WriteFile(filepath.Join(rw, "hello.txt"), []byte("over"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := srv.Get("data", "pre/hello.txt"); string(b) != "over" {
		t.Errorf("overwrite: bucket holds %q", b)
	}
	f, err := os.OpenFile(filepath.Join(rw, "hello.txt"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("+more"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := srv.Get("data", "pre/hello.txt"); string(b) != "over+more" {
		t.Errorf("append: bucket holds %q", b)
	}
	if err := os.Mkdir(filepath.Join(rw, "made"), 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(rw, "made")); err != nil || !fi.IsDir() {
		t.Errorf("mkdir: %v", err)
	}
	if ents, err := os.ReadDir(rw); err != nil || len(ents) != 5 {
		t.Errorf("ls after mkdir: %v (want 5: big.bin hello.txt made new.bin sub), %v", ents, err)
	}
	if err := os.WriteFile(filepath.Join(rw, "made", "in.txt"), []byte("in"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(rw, "made")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a full dir: %v", err)
	}
	if err := os.Rename(filepath.Join(rw, "made", "in.txt"), filepath.Join(rw, "moved.txt")); err != nil {
		t.Fatal(err)
	}
	if b, _ := srv.Get("data", "pre/moved.txt"); string(b) != "in" {
		t.Errorf("rename: bucket holds %q", b)
	}
	if _, err := srv.Get("data", "pre/made/in.txt"); err == nil {
		t.Errorf("rename left the old key")
	}
	if err := os.Remove(filepath.Join(rw, "made")); err != nil {
		t.Errorf("rmdir: %v", err)
	}
	if err := os.Truncate(filepath.Join(rw, "moved.txt"), 1); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(rw, "new.bin")); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Get("data", "pre/new.bin"); err == nil || !strings.Contains(err.Error(), "not exist") {
		t.Errorf("after rm: %v", err)
	}
}
