package mounts

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/gittest"
)

// A git mount is cloned with its token (which stays out of the clone), its
// origin carries no credential, a fork's copy is its own, and bad mounts
// are refused with nothing staged.
func TestGitStage(t *testing.T) {
	srv := &gittest.Server{Root: t.TempDir(), Token: "tok-never-in-the-clone"}
	srv.NewRepo(t, "repo", map[string]string{"README.md": "hello from git\n"})
	web := httptest.NewServer(srv.Handler(t))
	defer web.Close()
	data := t.TempDir()
	c := Config{StageDir: filepath.Join(data, "stage"), CloneRoot: filepath.Join(data, "sandboxes"),
		Secrets: secretMap{"git": srv.Token, "wrong": "nope"}}
	url := web.URL + "/repo.git"
	spec := Spec{Type: TypeGit, URL: url, Ref: "main", Secret: "git", Path: "/src"}

	got, err := c.Validate(t.Context(), []Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	src := got[0].Source
	if b, err := os.ReadFile(filepath.Join(src, "README.md")); err != nil || string(b) != "hello from git\n" {
		t.Fatalf("working tree: %q, %v", b, err)
	}
	if o := gittest.Run(t, src, "remote", "get-url", "origin"); o != url {
		t.Errorf("origin %q, want %q", o, url)
	}
	assertNoToken(t, src, srv.Token)

	// A create takes the clone into its sandbox's directory; a fork of it
	// gets a copy of its own.
	sbx := filepath.Join(c.CloneRoot, "sb-1")
	if err := os.MkdirAll(sbx, 0o700); err != nil {
		t.Fatal(err)
	}
	adopted, err := c.Adopt(got, sbx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(adopted[0].Source, "parent.txt"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	forked, err := c.Validate(t.Context(), adopted)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(forked[0].Source, "parent.txt")); string(b) != "p" {
		t.Errorf("the fork's copy lacks the parent's work")
	}
	if err := os.WriteFile(filepath.Join(forked[0].Source, "fork.txt"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(adopted[0].Source, "fork.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fork's write reached its parent: %v", err)
	}
	if err := c.Unstage(forked); err != nil {
		t.Fatal(err)
	}

	for name, mut := range map[string]func(*Spec){
		"wrong token":    func(s *Spec) { s.Secret = "wrong" },
		"no token":       func(s *Spec) { s.Secret = "" },
		"unknown secret": func(s *Spec) { s.Secret = "missing" },
		"no such repo":   func(s *Spec) { s.URL = web.URL + "/nope.git" },
		"no such ref":    func(s *Spec) { s.Ref = "nope" },
		"bad ref":        func(s *Spec) { s.Ref = "--upload-pack=x" },
		"creds in url":   func(s *Spec) { s.URL = strings.Replace(url, "http://", "http://u:p@", 1) },
		"ssh url":        func(s *Spec) { s.URL = "ssh://host/repo" },
		"given source":   func(s *Spec) { s.Source = "/etc" },
	} {
		sp := spec
		mut(&sp)
		if _, err := c.Validate(t.Context(), []Spec{sp}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if ents, _ := os.ReadDir(c.StageDir); len(ents) != 0 {
		t.Errorf("bad mounts left %d staged clones", len(ents))
	}
}

// assertNoToken fails if token is in any file under dir.
func assertNoToken(t *testing.T, dir, token string) {
	t.Helper()
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), token) {
				t.Errorf("the token is in %s", p)
			}
		}
		return nil
	})
}
