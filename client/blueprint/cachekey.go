package blueprint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/patternmatcher"
)

// keyVersion is part of every first key: changing how keys are computed
// must change it, so that old step snapshots are not taken for new ones.
const keyVersion = "agentbox-blueprint-v1"

// Keys returns bp's cache keys: keys[0] covers where the build starts (the
// base, or the template and its snapshot id templateSnapshot) and the VM
// size; keys[i] is sha256(keys[i-1], step i, and for a copy step the
// content of the copied files), so a change at step i changes keys i..n
// and nothing before. baseDir is where relative copy sources are.
func Keys(bp Blueprint, baseDir, templateSnapshot string) ([]string, error) {
	keys, _, err := plan(bp, baseDir, templateSnapshot)
	return keys, err
}

// origin is what the first key and progress name as the start of bp.
func (bp Blueprint) origin(templateSnapshot string) string {
	if bp.Template != "" {
		return "template:" + bp.Template + "@" + templateSnapshot
	}
	return "base:" + bp.Base
}

// plan computes the keys and scans every copy step's source (trees[i] for
// step i, 0-based).
func plan(bp Blueprint, baseDir, templateSnapshot string) ([]string, map[int]*tree, error) {
	first, err := json.Marshal(struct {
		Version   string `json:"version"`
		Origin    string `json:"origin"`
		VCPUs     int    `json:"vcpus"`
		MemoryMiB int    `json:"memory_mib"`
	}{keyVersion, bp.origin(templateSnapshot), bp.VCPUs, bp.MemoryMiB})
	if err != nil {
		return nil, nil, fmt.Errorf("blueprint: %w", err)
	}
	sum := sha256.Sum256(first)
	keys := []string{hex.EncodeToString(sum[:])}
	trees := map[int]*tree{}
	for i, s := range bp.Steps {
		var content []byte
		if s.Kind() == KindCopy {
			t, err := scan(localPath(baseDir, s.Copy.Src), baseDir, s.Copy.Ignore)
			if err != nil {
				return nil, nil, &StepError{Step: i + 1, Err: fmt.Errorf("copy: %w", err)}
			}
			trees[i] = t
			content = t.sum
		}
		k, err := stepKey(keys[i], s, content)
		if err != nil {
			return nil, nil, &StepError{Step: i + 1, Err: err}
		}
		keys = append(keys, k)
	}
	return keys, trees, nil
}

// stepKey is sha256(prev || 0 || canonical step || 0 || content).
func stepKey(prev string, s Step, content []byte) (string, error) {
	c := struct {
		Kind    string            `json:"kind"`
		Run     string            `json:"run,omitempty"`
		Src     string            `json:"src,omitempty"`
		Dest    string            `json:"dest,omitempty"`
		Env     map[string]string `json:"env,omitempty"` // encoding/json sorts the keys
		Workdir string            `json:"workdir,omitempty"`
		User    string            `json:"user,omitempty"`
		Exec    []string          `json:"exec,omitempty"`
		RunEnv  map[string]string `json:"run_env,omitempty"`
		File    string            `json:"file,omitempty"`
		Content string            `json:"content,omitempty"`
	}{Kind: s.Kind(), Run: s.Run, Env: s.Env, Workdir: s.Workdir, User: s.User, Exec: s.Exec, RunEnv: s.RunEnv}
	if s.Copy != nil {
		c.Src, c.Dest = s.Copy.Src, s.Copy.Dest
	}
	if s.File != nil {
		c.File, c.Content = s.File.Path, s.File.Content
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write([]byte{0})
	h.Write(b)
	h.Write([]byte{0})
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// localPath resolves a copy source against the blueprint's directory.
func localPath(baseDir, src string) string {
	p := filepath.FromSlash(src)
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(baseDir, p)
}

// tree is a scanned copy source: one file, or a directory and everything
// under it in lexical order (parents before children).
type tree struct {
	root    string
	isDir   bool
	entries []entry
	// sum covers every entry's relative path, mode and content.
	sum []byte
}

// entry is one file or directory of a tree.
type entry struct {
	rel  string // slash-separated, relative to the root; "." for the root
	mode fs.FileMode
	size int64
}

// scan walks root and hashes it. Symlinks to files are followed; symlinks
// to anything else, and special files, are errors. With ignore, paths
// (relative to base) that it matches are left out.
func scan(root, base string, ignore *patternmatcher.PatternMatcher) (*tree, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	skip := func(p string) (bool, error) {
		if ignore == nil {
			return false, nil
		}
		rel, err := filepath.Rel(base, p)
		if err != nil || rel == "." {
			return false, err
		}
		return ignore.MatchesOrParentMatches(filepath.ToSlash(rel))
	}
	if ignored, err := skip(root); err != nil {
		return nil, err
	} else if ignored && !(fi.IsDir() && ignore.Exclusions()) {
		return nil, fmt.Errorf("%s is excluded by .dockerignore", root)
	}
	if fi.IsDir() {
		// WalkDir does not follow a symlinked root; a source given by
		// name is followed like a file's.
		if root, err = filepath.EvalSymlinks(root); err != nil {
			return nil, err
		}
	}
	h := sha256.New()
	t := &tree{root: root, isDir: fi.IsDir()}
	if !fi.IsDir() {
		if err := t.add(h, ".", root, fi); err != nil {
			return nil, err
		}
		t.sum = h.Sum(nil)
		return t, nil
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel != "." {
			switch ignored, err := skip(p); {
			case err != nil:
				return err
			case ignored && d.IsDir() && !ignore.Exclusions():
				return filepath.SkipDir
			case ignored:
				return nil
			}
		}
		fi, err := os.Stat(p) // follows symlinks
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 && fi.IsDir() {
			return fmt.Errorf("%s: symlinks to directories are not copied", p)
		}
		return t.add(h, filepath.ToSlash(rel), p, fi)
	})
	if err != nil {
		return nil, err
	}
	t.sum = h.Sum(nil)
	return t, nil
}

// add hashes one entry into h and records it.
func (t *tree) add(h hash.Hash, rel, p string, fi fs.FileInfo) error {
	e := entry{rel: rel, mode: fi.Mode() & (fs.ModeDir | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
	var sum []byte
	switch {
	case fi.IsDir():
	case fi.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		fh := sha256.New()
		e.size, err = io.Copy(fh, f)
		if err := errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("hash %s: %w", p, err)
		}
		sum = fh.Sum(nil)
	default:
		return fmt.Errorf("%s: only files and directories are copied, not %v", p, fi.Mode().Type())
	}
	fmt.Fprintf(h, "%q %o %d %x\n", rel, uint32(e.mode), e.size, sum)
	t.entries = append(t.entries, e)
	return nil
}

// local returns an entry's local path.
func (t *tree) local(e entry) string {
	if e.rel == "." {
		return t.root
	}
	return filepath.Join(t.root, filepath.FromSlash(e.rel))
}

// String summarises a tree's size for progress.
func (t *tree) String() string {
	var files, dirs int
	var size int64
	for _, e := range t.entries {
		if e.mode.IsDir() {
			dirs++
		} else {
			files++
			size += e.size
		}
	}
	parts := []string{plural(files, "file")}
	if t.isDir {
		parts = append(parts, plural(dirs, "directory"))
	}
	return strings.Join(parts, ", ") + ", " + humanBytes(size)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(what, "y"))
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// humanBytes formats n as "512 B", "1.5 KiB", "12.0 MiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
