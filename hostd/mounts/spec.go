// Package mounts is hostd's side of sandbox mounts: it checks the mounts a
// create asks for against the operator's configuration, opens their sources
// (a host directory, an S3-compatible bucket) and serves the guest's FUSE operations on a
// stream of the agent channel (the Mounts ttrpc service of
// proto/agent/v1/mount.proto, with the guest as client).
//
// Everything from the guest is untrusted: paths are resolved beneath the
// mount's source with os.Root (no "..", no symlink out), sizes are bounded,
// a connection serves a few calls at a time (a guest that floods its mounts
// waits on itself), and read-only mounts refuse every change with EROFS.
//
// Fork semantics: a host directory is the operator's data, not the
// sandbox's, so every sandbox that mounts it (forks included) sees the same
// directory: writes are shared, last writer wins, and nothing is copied.
// A bucket likewise: every sandbox (and fork) that mounts it reads and writes
// the same objects, and the last upload of a key wins.
package mounts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrInvalid rejects a mount that the request got wrong or the operator does
// not allow; the API answers it with 400.
var ErrInvalid = errors.New("mounts: invalid mount")

// Mount types.
const (
	TypeHost = "host"
	TypeS3   = "s3"
)

// MaxMounts is the most mounts one sandbox may have.
const MaxMounts = 16

// Spec is one mount a create asks for.
type Spec struct {
	// Type is "host" or "s3".
	Type string `json:"type"`
	// Source is the host directory (absolute) of a host mount.
	Source string `json:"source,omitempty"`
	// Endpoint (http(s)://host[:port]), Bucket, Prefix (a key prefix, the
	// mount's root) and Region (optional) locate an s3 mount's objects;
	// Secret names the hostd secret holding ACCESS_KEY:SECRET_KEY.
	Endpoint string `json:"endpoint,omitempty"`
	Bucket   string `json:"bucket,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Region   string `json:"region,omitempty"`
	Secret   string `json:"secret,omitempty"`
	// URL (http(s), no credentials) and Ref (a branch or tag; empty for the
	// default) locate a git mount's repository; Secret, if set, names the
	// hostd secret holding its bearer token. hostd sets Source to its clone.
	URL string `json:"url,omitempty"`
	Ref string `json:"ref,omitempty"`
	// Path is the absolute guest path the mount appears at.
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// AllowSymlinks lets the guest make symlinks in a host mount, relative
	// ones that stay inside it; off, every symlink it makes is EPERM.
	AllowSymlinks bool `json:"allow_symlinks,omitempty"`
}

// Config is the operator's mount policy.
type Config struct {
	// HostRoots are the host directories under which host mounts may take
	// their source; none disables host mounts.
	HostRoots []string
	// Secrets gives the credentials of s3 and git mounts (hostd/secrets);
	// nil disables s3 mounts.
	Secrets Secrets
	// StageDir is where git mounts are cloned at create (then moved into
	// the sandbox's directory); CloneRoot is the directory of the sandboxes'
	// directories, where a fork's parent clone may be. Empty StageDir
	// disables git mounts.
	StageDir, CloneRoot string
	// GitHosts pins git hosts' names to addresses for hostd's own clones
	// (the egress proxy's static name map), and GitCAFile adds the roots
	// they are verified with (the proxy's upstream CA); both optional.
	GitHosts  map[string]string
	GitCAFile string
}

// Secrets opens a named secret.
type Secrets interface {
	SecretValue(ctx context.Context, name string) ([]byte, error)
}

// reservedTrees are guest paths that no mount may cover or go under: the
// kernel's and the agent's own filesystems.
var reservedTrees = []string{"/proc", "/sys", "/dev", "/run"}

// systemTrees hold the guest's system: its programs, libraries (/lib,
// /lib64, /lib32, /libx32: every top-level /lib*), configuration and boot
// files. No mount may cover them or go under them: a mount at /usr/bin
// would replace the programs that hostd's own execs run (sh, the package
// managers).
var systemTrees = []string{"/usr", "/bin", "/sbin", "/etc", "/boot"}

// reservedDirs may not be mounted over as a whole (they hold the guest's
// state), though a mount may go beneath them.
var reservedDirs = []string{"/", "/var", "/tmp", "/root", "/home", "/newroot"}

// Validate checks specs against c and returns them with their host sources
// resolved (symlinks followed); an s3 mount's secret must exist and its
// bucket answer a listing with it. Every error wraps ErrInvalid and says why.
func (c Config) Validate(ctx context.Context, specs []Spec) ([]Spec, error) {
	if len(specs) > MaxMounts {
		return nil, fmt.Errorf("%w: at most %d mounts, got %d", ErrInvalid, MaxMounts, len(specs))
	}
	out := make([]Spec, 0, len(specs))
	for i, s := range specs {
		if err := checkGuestPath(s.Path); err != nil {
			return nil, fmt.Errorf("%w: mounts[%d]: %v", ErrInvalid, i, err)
		}
		for _, o := range out {
			if within(s.Path, o.Path) || within(o.Path, s.Path) {
				return nil, fmt.Errorf("%w: mounts[%d]: path %s overlaps mount %s", ErrInvalid, i, s.Path, o.Path)
			}
		}
		if s.AllowSymlinks && s.Type != TypeHost {
			return nil, fmt.Errorf("%w: mounts[%d]: allow_symlinks is for host mounts (a git mount takes symlinks that stay inside, an s3 mount none)", ErrInvalid, i)
		}
		switch s.Type {
		case TypeHost:
			src, err := c.hostSource(s.Source)
			if err != nil {
				return nil, fmt.Errorf("%w: mounts[%d]: %v", ErrInvalid, i, err)
			}
			s.Source = src
		case TypeS3:
			if err := c.checkS3(ctx, s); err != nil {
				return nil, fmt.Errorf("mounts[%d]: %w", i, err)
			}
		case TypeGit:
		default:
			return nil, fmt.Errorf("%w: mounts[%d]: unknown type %q (want host, s3 or git)", ErrInvalid, i, s.Type)
		}
		out = append(out, s)
	}
	for i, s := range out {
		if s.Type != TypeGit {
			continue
		}
		staged, err := c.stageGit(ctx, s)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("mounts[%d]: %w", i, err), c.Unstage(out[:i]))
		}
		out[i] = staged
	}
	return out, nil
}

// checkGuestPath accepts an absolute, clean guest path outside the reserved
// trees and other than a reserved directory.
func checkGuestPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is not absolute", p)
	case hasDotDot(p):
		return fmt.Errorf("path %q contains ..", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("path %q is not clean", p)
	case len(p) > 1024:
		return fmt.Errorf("path is longer than 1024 bytes")
	}
	for _, r := range reservedTrees {
		if within(p, r) {
			return fmt.Errorf("path %s is under %s, which the guest kernel and agent own", p, r)
		}
	}
	for _, r := range systemTrees {
		if within(p, r) {
			return fmt.Errorf("path %s is in the guest's system directory %s", p, r)
		}
	}
	if top, _, _ := strings.Cut(p[1:], "/"); strings.HasPrefix(top, "lib") {
		return fmt.Errorf("path %s is in the guest's system directory /%s", p, top)
	}
	if slices.Contains(reservedDirs, p) {
		return fmt.Errorf("path %s would hide the guest's system directory", p)
	}
	return nil
}

// hostSource resolves a host mount's source and checks that it is a
// directory under one of the allowed roots.
func (c Config) hostSource(src string) (string, error) {
	switch {
	case len(c.HostRoots) == 0:
		return "", errors.New("host mounts are not enabled on this hostd (no allowed host roots configured)")
	case !filepath.IsAbs(src):
		return "", fmt.Errorf("source %q is not an absolute path", src)
	case hasDotDot(src):
		return "", fmt.Errorf("source %q contains ..", src)
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", src, errors.Unwrap(err))
	}
	allowed := false
	for _, r := range c.HostRoots {
		rr, err := filepath.EvalSymlinks(r)
		if err == nil && within(real, rr) {
			allowed = true
			break
		}
	}
	if !allowed {
		return "", fmt.Errorf("source %s is not under an allowed host root (%s)", src, strings.Join(c.HostRoots, ", "))
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", src, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("source %s is not a directory", src)
	}
	return real, nil
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// checkS3 checks an s3 mount's fields, its secret and its bucket.
func (c Config) checkS3(ctx context.Context, s Spec) error {
	switch {
	case s.Endpoint == "" || s.Bucket == "" || s.Secret == "":
		return fmt.Errorf("%w: an s3 mount needs endpoint, bucket and secret", ErrInvalid)
	case s.Source != "":
		return fmt.Errorf("%w: an s3 mount takes no source", ErrInvalid)
	case hasDotDot(s.Prefix):
		return fmt.Errorf("%w: prefix %q contains ..", ErrInvalid, s.Prefix)
	}
	b, err := c.openS3(ctx, s, true)
	if err != nil {
		return err
	}
	return b.Close()
}

// openS3 opens an s3 mount with its secret's credentials.
func (c Config) openS3(ctx context.Context, s Spec, probe bool) (*s3Bucket, error) {
	if c.Secrets == nil {
		return nil, fmt.Errorf("%w: s3 mounts are not enabled on this hostd (no secrets)", ErrInvalid)
	}
	v, err := c.Secrets.SecretValue(ctx, s.Secret)
	if err != nil {
		return nil, fmt.Errorf("%w: secret %q: %v", ErrInvalid, s.Secret, err)
	}
	return openS3(ctx, s, v, probe)
}
