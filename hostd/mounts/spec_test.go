package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	outside := t.TempDir()
	for _, d := range []string{data, filepath.Join(data, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := Config{HostRoots: []string{root}}
	ok, err := c.Validate(t.Context(), []Spec{{Type: TypeHost, Source: data, Path: "/data", ReadOnly: true}, {Type: TypeHost, Source: data + "/sub", Path: "/root/work", AllowSymlinks: true}})
	if err != nil || len(ok) != 2 {
		t.Fatalf("valid mounts: %v", err)
	}
	host := func(src, path string) []Spec { return []Spec{{Type: TypeHost, Source: src, Path: path}} }
	for name, tc := range map[string]struct {
		specs []Spec
		why   string
	}{
		"outside the roots":  {host(outside, "/data"), "not under an allowed host root"},
		"dotdot source":      {host(data+"/../data", "/data"), "contains .."},
		"symlink out":        {host(filepath.Join(root, "link-out"), "/data"), "not under an allowed host root"},
		"relative source":    {host("data", "/data"), "not an absolute path"},
		"missing source":     {host(filepath.Join(root, "nope"), "/data"), "nope"},
		"file source":        {host(filepath.Join(root, "file"), "/data"), "not a directory"},
		"over proc":          {host(data, "/proc"), "under /proc"},
		"under sys":          {host(data, "/sys/fs/x"), "under /sys"},
		"under dev":          {host(data, "/dev/shm"), "under /dev"},
		"agent run":          {host(data, "/run/agent"), "under /run"},
		"root":               {host(data, "/"), "system directory"},
		"usr":                {host(data, "/usr"), "system directory"},
		"usr bin":            {host(data, "/usr/bin"), "system directory /usr"},
		"under etc":          {host(data, "/etc/ssl/certs"), "system directory /etc"},
		"lib64":              {host(data, "/lib64"), "system directory /lib64"},
		"under libx32":       {host(data, "/libx32/x"), "system directory /libx32"},
		"boot":               {host(data, "/boot/efi"), "system directory /boot"},
		"sbin":               {host(data, "/sbin"), "system directory /sbin"},
		"dotdot path":        {host(data, "/data/../etc"), "contains .."},
		"relative path":      {host(data, "data"), "not absolute"},
		"unknown type":       {[]Spec{{Type: "nfs", Path: "/data"}}, "unknown type"},
		"overlapping mounts": {append(host(data, "/data"), host(data, "/data/x")...), "overlaps"},
		"symlinks in s3":     {[]Spec{{Type: TypeS3, Path: "/data", AllowSymlinks: true}}, "allow_symlinks is for host mounts"},
	} {
		_, err := c.Validate(t.Context(), tc.specs)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: got %v, want ErrInvalid saying %q", name, err, tc.why)
		}
	}
	if _, err := (Config{}).Validate(t.Context(), host(data, "/data")); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not enabled") {
		t.Errorf("no roots: %v", err)
	}
}
