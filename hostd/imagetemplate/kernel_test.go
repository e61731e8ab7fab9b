package imagetemplate

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

func write(t *testing.T, p string, data []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKernelFor(t *testing.T) {
	root := t.TempDir()
	bz := make([]byte, 0x300)
	copy(bz[0x202:], "HdrS")
	elf := write(t, filepath.Join(root, "vmlinux"), []byte("\x7fELF\x02\x01\x01rest"))
	write(t, filepath.Join(root, "bzImage"), bz)
	write(t, filepath.Join(root, "notes.txt"), []byte("not a kernel"))
	write(t, filepath.Join(root, "mods/a.ko"), []byte("module a"))
	write(t, filepath.Join(root, "mods/b.ko"), []byte("module b"))
	write(t, filepath.Join(root, "mods/modules.order"), []byte("b.ko\na.ko\n"))
	write(t, filepath.Join(root, "bad/modules.order"), []byte("../vmlinux\n"))
	write(t, filepath.Join(root, "missing/modules.order"), []byte("gone.ko\n"))
	base := write(t, filepath.Join(root, "initramfs.cpio"), []byte("BASE-ARCHIVE"))
	outside := write(t, filepath.Join(t.TempDir(), "vmlinux"), []byte("\x7fELF"))
	b := &Builder{Initramfs: base, KernelDir: filepath.Join(root, "kernels")}
	b.Source.LocalRoots = []string{root}

	for _, tc := range []struct {
		name            string
		kernel, modules string
		want            string // error substring; "" = ok
	}{
		{"elf", elf, "", ""},
		{"bzImage", filepath.Join(root, "bzImage"), "", ""},
		{"not a kernel", filepath.Join(root, "notes.txt"), "", "is not a kernel"},
		{"outside the import dirs", outside, "", "not under a directory hostd imports from"},
		{"modules without a kernel", "", filepath.Join(root, "mods"), "needs a kernel"},
		{"modules path escape", elf, filepath.Join(root, "bad"), "not a plain file name"},
		{"module missing", elf, filepath.Join(root, "missing"), "gone.ko"},
		{"no modules.order", elf, root, "modules.order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := b.kernelFor(Request{Kernel: tc.kernel, Modules: tc.modules})
			if tc.want == "" {
				if err != nil || a.kernel == "" {
					t.Fatalf("got %+v, %v", a, err)
				}
				a.cleanup()
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an invalid-request error containing %q", err, tc.want)
			}
		})
	}

	a, err := b.kernelFor(Request{Kernel: elf, Modules: filepath.Join(root, "mods")})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(a.initramfs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("BASE-ARCHIVE")) {
		t.Fatalf("initramfs does not start with hostd's")
	}
	gz, err := gzip.NewReader(bytes.NewReader(data[len("BASE-ARCHIVE"):]))
	if err != nil {
		t.Fatal(err)
	}
	r := cpio.NewReader(gz)
	got := map[string]string{}
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r)
		got[h.Name] = string(body)
	}
	want := map[string]string{"lib/modules/modules.order": "b.ko\na.ko\n", "lib/modules/a.ko": "module a", "lib/modules/b.ko": "module b"}
	if len(got) != len(want) {
		t.Errorf("appended archive: got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("appended %s: got %q, want %q", k, got[k], v)
		}
	}
	a.cleanup()
	if _, err := os.Stat(a.initramfs); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s", a.initramfs)
	}
}
