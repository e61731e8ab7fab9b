// Package leakcheck finds what a hostd left on the host, for the tests and
// the soak that check a hostd cleans up after itself.
package leakcheck

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
)

// Instance is the name hostd derives from its data directory for its
// cgroups ("i-" and 12 hex digits of the directory's sha256).
func Instance(data string) string {
	abs, _ := filepath.Abs(data)
	sum := sha256.Sum256([]byte(abs))
	return "i-" + hex.EncodeToString(sum[:6])
}

// Cgroups lists the sandboxes that have a cgroup under data's hostd
// instance, in any hierarchy (v1 or v2).
func Cgroups(data string) []string {
	inst := Instance(data)
	var left []string
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/" + inst + "/*")
	more, _ := filepath.Glob("/sys/fs/cgroup/agentbox/" + inst + "/*")
	for _, d := range append(dirs, more...) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && !slices.Contains(left, filepath.Base(d)) {
			left = append(left, filepath.Base(d))
		}
	}
	return left
}
