package qemu

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// QEMU runs in its VM directory (Config.Dir is its working directory) and
// names the files there relative to it: disk-1.qcow2, not the host path.
// QEMU opens a snapshot's new overlay, and reopens the frozen one read-only,
// by name after it dropped privileges (-runas) and chrooted into that
// directory (-chroot): a relative name means the same file before and
// after, and needs search permission on the VM's directory only, not on
// the directories above it, which stay closed to the VMM's user.

// inDir is how QEMU, working in dir, names path: relative when path is in
// dir; other paths stay as they are.
func inDir(dir, path string) string {
	if filepath.IsAbs(path) && filepath.Dir(path) == filepath.Clean(dir) {
		return filepath.Base(path)
	}
	return path
}

// hostPath turns a file name that QEMU working in dir reports (query-block)
// back into a host path: a json: name (QEMU makes one when a node's backing
// is not the one its header names) gives its top file, and a relative name
// is in dir.
func hostPath(dir, name string) (string, error) {
	if js, ok := strings.CutPrefix(name, "json:"); ok {
		var spec struct {
			File struct {
				Filename string `json:"filename"`
			} `json:"file"`
		}
		if err := json.Unmarshal([]byte(js), &spec); err != nil || spec.File.Filename == "" {
			return "", fmt.Errorf("qemu: disk name %.200q: no file name", name)
		}
		name = spec.File.Filename
	}
	if !filepath.IsAbs(name) {
		return filepath.Join(dir, name), nil
	}
	return name, nil
}
