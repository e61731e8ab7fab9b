package imagetemplate

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cavaliergopher/cpio"

	"github.com/agentbox/agentbox/images/oci"
	"github.com/agentbox/agentbox/snapshot"
)

// maxModules bounds a modules directory's modules.order.
const maxModules = 4096

// Kernel is a template's own kernel as its image record keeps it.
type Kernel struct {
	// Path is the kernel file the template was built with and Digest its
	// sha256 ("sha256:…").
	Path   string `json:"path"`
	Digest string `json:"digest"`
	// ModulesDir is its modules directory ("" = hostd's initramfs
	// modules) and Modules the modules it lists, in load order.
	ModulesDir string   `json:"modules_dir,omitempty"`
	Modules    []string `json:"modules,omitempty"`
}

// bootAssets are the kernel and initramfs a build boots ("" for hostd's).
type bootAssets struct {
	kernel, initramfs string
	info              *Kernel // nil for hostd's kernel
	cleanup           func()
}

// kernelFor checks req's kernel and modules directory. With modules, it
// writes an initramfs that is hostd's with a second archive appended (the
// kernel unpacks concatenated archives in order, so the later
// /lib/modules/modules.order and .ko files win); the caller runs cleanup
// once the build's VM has booted.
func (b *Builder) kernelFor(req Request) (bootAssets, error) {
	none := bootAssets{cleanup: func() {}}
	if req.Kernel == "" {
		if req.Modules != "" {
			return none, fmt.Errorf("%w: a modules directory needs a kernel", ErrInvalid)
		}
		return none, nil
	}
	kernel, err := oci.LocalPath(req.Kernel, b.Source.LocalRoots)
	if err != nil {
		return none, fmt.Errorf("%w: kernel: %v", ErrInvalid, err)
	}
	if err := checkKernel(kernel); err != nil {
		return none, err
	}
	digest, err := fileDigest(kernel)
	if err != nil {
		return none, fmt.Errorf("kernel: %w", err)
	}
	out := bootAssets{kernel: kernel, info: &Kernel{Path: kernel, Digest: digest}, cleanup: func() {}}
	if req.Modules == "" {
		return out, nil
	}
	dir, err := oci.LocalPath(req.Modules, b.Source.LocalRoots)
	if err != nil {
		return none, fmt.Errorf("%w: modules: %v", ErrInvalid, err)
	}
	if out.initramfs, out.info.Modules, err = b.initramfsWith(dir); err != nil {
		return none, err
	}
	out.info.ModulesDir = dir
	out.cleanup = func() { _ = os.Remove(out.initramfs) }
	return out, nil
}

// checkKernel refuses a file that is neither an ELF (a PVH vmlinux) nor a
// bzImage (its "HdrS" setup header magic at 0x202).
func checkKernel(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("%w: kernel: %v", ErrInvalid, err)
	}
	defer f.Close()
	head := make([]byte, 0x206)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if bytes.HasPrefix(head, []byte("\x7fELF")) || (n == len(head) && string(head[0x202:0x206]) == "HdrS") {
		return nil
	}
	return fmt.Errorf("%w: kernel %s is not a kernel (neither an ELF vmlinux nor a bzImage)", ErrInvalid, p)
}

// initramfsWith writes hostd's initramfs with dir's modules appended and
// returns it and the modules' names.
func (b *Builder) initramfsWith(dir string) (string, []string, error) {
	names, err := moduleOrder(dir)
	if err != nil {
		return "", nil, err
	}
	if b.Initramfs == "" {
		return "", nil, fmt.Errorf("%w: this hostd boots without an initramfs, so it takes no modules directory", ErrInvalid)
	}
	if err := os.MkdirAll(b.KernelDir, 0o755); err != nil {
		return "", nil, err
	}
	f, err := os.CreateTemp(b.KernelDir, "initramfs-*.cpio")
	if err != nil {
		return "", nil, err
	}
	err = writeInitramfs(f, b.Initramfs, dir, names)
	err = errors.Join(err, f.Chmod(0o644), f.Close())
	if err != nil {
		_ = os.Remove(f.Name())
		return "", nil, fmt.Errorf("initramfs with modules %s: %w", dir, err)
	}
	return f.Name(), names, nil
}

// fileDigest is "sha256:" and the hex sha256 of file p.
func fileDigest(p string) (string, error) {
	d, err := snapshot.FileDigest(p)
	if err != nil {
		return "", err
	}
	return "sha256:" + d, nil
}

// moduleOrder reads dir/modules.order: plain names of files in dir.
func moduleOrder(dir string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, "modules.order"))
	if err != nil {
		return nil, fmt.Errorf("%w: modules: %v", ErrInvalid, err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n := strings.TrimSpace(sc.Text())
		switch {
		case n == "":
			continue
		case strings.ContainsRune(n, '/') || n == "." || n == "..":
			return nil, fmt.Errorf("%w: modules.order: %q is not a plain file name", ErrInvalid, n)
		case len(names) == maxModules:
			return nil, fmt.Errorf("%w: modules.order lists more than %d modules", ErrInvalid, maxModules)
		}
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: modules.order lists %s, which is not a file in %s", ErrInvalid, n, dir)
		}
		names = append(names, n)
	}
	return names, sc.Err()
}

// writeInitramfs copies base to w and appends a gzipped newc archive of
// lib/modules/modules.order and the modules.
func writeInitramfs(w io.Writer, base, dir string, names []string) error {
	bf, err := os.Open(base)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, bf)
	bf.Close()
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(w)
	cw := cpio.NewWriter(gz)
	add := func(name string, data []byte) error {
		if err := cw.WriteHeader(&cpio.Header{Name: "lib/modules/" + name, Mode: cpio.TypeReg | 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := cw.Write(data)
		return err
	}
	if err := add("modules.order", []byte(strings.Join(names, "\n")+"\n")); err != nil {
		return err
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		if err := add(n, data); err != nil {
			return err
		}
	}
	return errors.Join(cw.Close(), gz.Close())
}
