package mounts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// TypeGit is a git repository that hostd clones (with the mount's secret as
// a bearer token) and serves as a host directory.
const TypeGit = "git"

// gitCloneTimeout bounds one clone or copy of a repository.
const gitCloneTimeout = 10 * time.Minute

// validRef is a branch or tag name that git's option parsing cannot mistake.
var validRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$`)

// GitHost returns the host of a git mount's URL (for its egress rule).
func GitHost(s Spec) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// checkGitURL accepts http(s) URLs without credentials in them.
func checkGitURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("url %q: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("url %q: want http(s)://", raw)
	case u.Host == "":
		return fmt.Errorf("url %q: no host", raw)
	case u.User != nil:
		return fmt.Errorf("url %q: credentials go in a secret, not the URL", raw)
	}
	return nil
}

// stageGit clones (or, for a fork, shares: gitfork.go) a git mount into a new directory
// under c.StageDir and returns s with Source set to it. The token is given
// to git in its environment (GIT_CONFIG_*), never in argv or the clone's
// config; origin is the URL without credentials.
func (c Config) stageGit(ctx context.Context, s Spec) (Spec, error) {
	if err := checkGitURL(s.URL); err != nil {
		return s, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if s.Ref != "" && !validRef.MatchString(s.Ref) {
		return s, fmt.Errorf("%w: ref %q", ErrInvalid, s.Ref)
	}
	if c.StageDir == "" {
		return s, fmt.Errorf("%w: git mounts are not enabled on this hostd (no staging directory)", ErrInvalid)
	}
	if err := os.MkdirAll(c.StageDir, 0o700); err != nil {
		return s, err
	}
	dir, err := os.MkdirTemp(c.StageDir, "git-")
	if err != nil {
		return s, err
	}
	ctx, cancel := context.WithTimeout(ctx, gitCloneTimeout)
	defer cancel()
	if s.Source != "" { // a fork: share its parent's working tree
		if !c.ownsClone(s.Source) {
			os.RemoveAll(dir)
			return s, fmt.Errorf("%w: a git mount takes no source", ErrInvalid)
		}
		if err := linkTree(ctx, s.Source, dir); err != nil {
			os.RemoveAll(dir)
			return s, fmt.Errorf("mounts: share the clone: %w", err)
		}
		s.Source = dir
		return s, nil
	}
	env := append(os.Environ(), c.gitEnv(s)...)
	if c.GitCAFile != "" {
		bundle, err := c.caBundle()
		if err != nil {
			os.RemoveAll(dir)
			return s, err
		}
		defer os.Remove(bundle)
		env = append(env, "GIT_SSL_CAINFO="+bundle) // the environment's wins over the config's
	}
	if s.Secret != "" {
		if c.Secrets == nil {
			os.RemoveAll(dir)
			return s, fmt.Errorf("%w: this hostd has no secrets", ErrInvalid)
		}
		tok, err := c.Secrets.SecretValue(ctx, s.Secret)
		if err != nil {
			os.RemoveAll(dir)
			return s, fmt.Errorf("%w: secret %q: %v", ErrInvalid, s.Secret, err)
		}
		env = append(env, "GIT_CONFIG_KEY_2=http.extraHeader",
			"GIT_CONFIG_VALUE_2=Authorization: Bearer "+strings.TrimSpace(string(tok)))
	}
	args := []string{"clone", "--quiet"}
	if s.Ref != "" {
		args = append(args, "--branch", s.Ref)
	}
	args = append(args, "--", s.URL, dir)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = append(env, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return s, fmt.Errorf("%w: git clone %s: %v: %s", ErrInvalid, s.URL, err, bytes.TrimSpace(out))
	}
	s.Source = dir
	return s, nil
}

// systemRoots is the system's CA bundle (Debian's path).
const systemRoots = "/etc/ssl/certs/ca-certificates.crt"

// caBundle writes the system roots and GitCAFile's into one temp file (git
// takes a single CA file) and returns its path; the caller removes it.
func (c Config) caBundle() (string, error) {
	extra, err := os.ReadFile(c.GitCAFile)
	if err != nil {
		return "", fmt.Errorf("mounts: git CA file: %w", err)
	}
	sys, _ := os.ReadFile(systemRoots) // none: only the extra roots
	f, err := os.CreateTemp("", "agentbox-git-roots-*.pem")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(append(append(sys, '\n'), extra...))
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// gitEnv configures a clone's git through its environment (GIT_CONFIG_*:
// key 0 pins the host's address, key 1 is unused (the CA bundle goes in
// GIT_SSL_CAINFO, which outranks the config), key 2 the token; an unused
// key is a harmless agentbox.unused).
func (c Config) gitEnv(s Spec) []string {
	u, _ := url.Parse(s.URL)
	resolve, ca := "http.curloptResolve", "http.sslCAInfo"
	resolveV, caV := "", ""
	if ip, ok := c.GitHosts[u.Hostname()]; ok {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		resolveV = u.Hostname() + ":" + port + ":" + ip
	}
	if resolveV == "" {
		resolve = "agentbox.unused"
	}
	if caV == "" {
		ca = "agentbox.unused"
	}
	return []string{"GIT_CONFIG_COUNT=3", "GIT_CONFIG_KEY_0=" + resolve, "GIT_CONFIG_VALUE_0=" + resolveV,
		"GIT_CONFIG_KEY_1=" + ca, "GIT_CONFIG_VALUE_1=" + caV, "GIT_CONFIG_KEY_2=agentbox.unused", "GIT_CONFIG_VALUE_2="}
}

// ownsClone reports whether dir is a clone hostd made: in a sandbox's
// directory (c.CloneRoot) and not a path the request made up.
func (c Config) ownsClone(dir string) bool {
	if c.CloneRoot == "" || !filepath.IsAbs(dir) || hasDotDot(dir) {
		return false
	}
	return within(filepath.Clean(dir), c.CloneRoot) && dir != c.CloneRoot
}

// Unstage removes the staged clones of specs that are still under
// c.StageDir (a create that failed before its sandbox took them).
func (c Config) Unstage(specs []Spec) error {
	var errs []error
	for _, s := range specs {
		if s.Type == TypeGit && c.StageDir != "" && within(s.Source, c.StageDir) && s.Source != c.StageDir {
			errs = append(errs, os.RemoveAll(s.Source))
		}
	}
	return errors.Join(errs...)
}

// Adopt moves the staged clones of specs into dir (a sandbox's directory)
// and returns the specs with their new sources.
func (c Config) Adopt(specs []Spec, dir string) ([]Spec, error) {
	out := append([]Spec(nil), specs...)
	for i, s := range out {
		if s.Type != TypeGit || !within(s.Source, c.StageDir) {
			continue
		}
		dst := filepath.Join(dir, fmt.Sprintf("git-%d", i))
		if err := os.Rename(s.Source, dst); err != nil {
			return nil, fmt.Errorf("mounts: adopt clone: %w", err)
		}
		out[i].Source = dst
	}
	return out, nil
}
