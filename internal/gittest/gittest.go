// Package gittest serves git repositories over smart HTTP for tests: Go's
// net/http/cgi in front of `git http-backend`, requiring a bearer token.
package gittest

import (
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Server serves the bare repositories under Root.
type Server struct {
	// Root holds the bare repositories (NAME.git).
	Root string
	// Token is the bearer token every request must carry.
	Token string
}

// Handler is the git smart-HTTP handler: requests without the token get 401.
func (s *Server) Handler(t testing.TB) http.Handler {
	exe, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	backend := &cgi.Handler{Path: exe, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1"}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+s.Token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="test"`)
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	})
}

// Run runs git in dir and fails the test on error; it returns the output.
func Run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// NewRepo makes Root/name.git, a bare repository (pushes allowed) whose
// branch main has one commit holding files.
func (s *Server) NewRepo(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	work := t.TempDir()
	Run(t, work, "init", "-q", "-b", "main")
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Run(t, work, "add", "-A")
	Run(t, work, "commit", "-q", "-m", "initial")
	bare := filepath.Join(s.Root, name+".git")
	Run(t, s.Root, "clone", "-q", "--bare", work, bare)
	Run(t, bare, "config", "http.receivepack", "true")
	return bare
}
