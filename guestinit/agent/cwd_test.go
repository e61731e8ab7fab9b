package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestBuildCmdCwd: a cwd that does not exist, or is not a directory, is
// the error, by name (issue 38: the exec blamed /usr/bin/sh).
func TestBuildCmdCwd(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, cwd string
		want      error
	}{
		{"missing", filepath.Join(dir, "nope"), fs.ErrNotExist},
		{"a file", file, syscall.ENOTDIR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildCmd([]string{"/bin/sh"}, nil, tc.cwd)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "cwd "+tc.cwd) {
				t.Fatalf("got %v, want %v naming cwd %s", err, tc.want, tc.cwd)
			}
			if codeOf(err) == 0 {
				t.Errorf("code: got OK")
			}
		})
	}
	if cmd, err := buildCmd([]string{"/bin/sh"}, nil, dir); err != nil || cmd.Dir != dir {
		t.Fatalf("existing cwd: got %v, %v", cmd, err)
	}
}
