package cloudhypervisor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// qcowSpec is a qcow2 header to write; only what the chain check reads.
type qcowSpec struct {
	version       uint32 // 3 when zero
	backing       string
	backingFormat string
	dataFile      bool // set the external data file bit
}

// writeQcow2 writes a minimal qcow2 image at path: a header, its extensions
// and the backing file name, laid out as QEMU does.
func writeQcow2(t testing.TB, path string, s qcowSpec) string {
	t.Helper()
	if s.version == 0 {
		s.version = 3
	}
	headerLen := uint32(104)
	if s.version == 2 {
		headerLen = 72
	}
	be := binary.BigEndian
	b := make([]byte, headerLen)
	be.PutUint32(b[0:], qcowMagic)
	be.PutUint32(b[4:], s.version)
	be.PutUint32(b[20:], 16)    // cluster_bits
	be.PutUint64(b[24:], 1<<30) // virtual size
	if s.version == 3 {
		if s.dataFile {
			be.PutUint64(b[72:], incompatDataFile)
		}
		be.PutUint32(b[96:], 4) // refcount_order
		be.PutUint32(b[100:], headerLen)
	}
	ext := func(typ uint32, data []byte) {
		var tl [8]byte
		be.PutUint32(tl[0:], typ)
		be.PutUint32(tl[4:], uint32(len(data)))
		b = append(b, tl[:]...)
		b = append(b, data...)
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
	}
	if s.backingFormat != "" {
		ext(extBackingFormat, []byte(s.backingFormat))
	}
	ext(extEnd, nil)
	if s.backing != "" {
		be.PutUint64(b[8:], uint64(len(b)))
		be.PutUint32(b[16:], uint32(len(s.backing)))
		b = append(b, s.backing...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImageChain(t *testing.T) {
	root := realDir(t, t.TempDir())
	outside := realDir(t, t.TempDir())
	p := func(name string) string { return filepath.Join(root, name) }
	base := writeQcow2(t, p("base.qcow2"), qcowSpec{})
	rawBase := p("base.raw")
	if err := os.WriteFile(rawBase, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeQcow2(t, p("mid.qcow2"), qcowSpec{backing: base, backingFormat: "qcow2"})
	writeQcow2(t, p("top.qcow2"), qcowSpec{backing: "mid.qcow2"}) // relative, no format: probed
	writeQcow2(t, p("sub/rel.qcow2"), qcowSpec{backing: "../base.qcow2", version: 2})
	if err := os.Symlink(p("sub/rel.qcow2"), p("link.qcow2")); err != nil {
		t.Fatal(err)
	}
	writeQcow2(t, p("on-raw.qcow2"), qcowSpec{backing: rawBase, backingFormat: "raw"})
	writeQcow2(t, p("on-probed-raw.qcow2"), qcowSpec{backing: rawBase})
	writeQcow2(t, p("vmdk.qcow2"), qcowSpec{backing: base, backingFormat: "vmdk"})
	writeQcow2(t, p("datafile.qcow2"), qcowSpec{dataFile: true})
	writeQcow2(t, p("missing.qcow2"), qcowSpec{backing: p("nope.qcow2")})
	writeQcow2(t, filepath.Join(outside, "evil-base.qcow2"), qcowSpec{})
	writeQcow2(t, p("escape.qcow2"), qcowSpec{backing: filepath.Join(outside, "evil-base.qcow2")})
	writeQcow2(t, p("dotdot.qcow2"), qcowSpec{backing: "../" + filepath.Base(outside) + "/evil-base.qcow2"})
	if err := os.Symlink(filepath.Join(outside, "evil-base.qcow2"), p("evil-link.qcow2")); err != nil {
		t.Fatal(err)
	}
	writeQcow2(t, p("via-link.qcow2"), qcowSpec{backing: "evil-link.qcow2"})
	writeQcow2(t, p("loop.qcow2"), qcowSpec{backing: "loop.qcow2"})
	// A chain exactly maxBackingDepth deep, and one a level deeper.
	prev := base
	for i := 1; i <= maxBackingDepth+1; i++ {
		prev = writeQcow2(t, p("deep"+strconv.Itoa(i)+".qcow2"), qcowSpec{backing: prev, backingFormat: "qcow2"})
	}

	tests := []struct {
		name    string
		path    string
		raw     bool
		want    []string // nil: want an error
		wantLen int      // when want is nil and the chain is long, check only its length
	}{
		{name: "single", path: base, want: []string{base}},
		{name: "chain with relative and probed links", path: p("top.qcow2"), want: []string{p("top.qcow2"), p("mid.qcow2"), base}},
		{name: "relative to the real dir of a symlinked v2 image", path: p("link.qcow2"), want: []string{p("sub/rel.qcow2"), base}},
		{name: "raw backing file by format", path: p("on-raw.qcow2"), want: []string{p("on-raw.qcow2"), rawBase}},
		{name: "raw backing file by probe", path: p("on-probed-raw.qcow2"), want: []string{p("on-probed-raw.qcow2"), rawBase}},
		{name: "raw disk", path: rawBase, raw: true, want: []string{rawBase}},
		{name: "max depth", path: p("deep" + strconv.Itoa(maxBackingDepth) + ".qcow2"), wantLen: maxBackingDepth + 1},
		{name: "too deep", path: p("deep" + strconv.Itoa(maxBackingDepth+1) + ".qcow2")},
		{name: "loop", path: p("loop.qcow2")},
		{name: "raw file as qcow2 disk", path: rawBase},
		{name: "unknown backing format", path: p("vmdk.qcow2")},
		{name: "external data file", path: p("datafile.qcow2")},
		{name: "missing backing file", path: p("missing.qcow2")},
		{name: "backing file outside", path: p("escape.qcow2")},
		{name: "relative escape", path: p("dotdot.qcow2")},
		{name: "symlink escape", path: p("via-link.qcow2")},
		{name: "top image outside", path: filepath.Join(outside, "evil-base.qcow2")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := imageChain(tc.path, tc.raw, []string{root})
			switch {
			case tc.want == nil && tc.wantLen == 0:
				if !errors.Is(err, ErrBadImageChain) {
					t.Fatalf("got %v, %v; want an error wrapping ErrBadImageChain", got, err)
				}
				t.Logf("refused: %v", err)
			case err != nil:
				t.Fatalf("got error %v, want a chain", err)
			case tc.wantLen != 0 && len(got) != tc.wantLen:
				t.Fatalf("got a chain of %d, want %d", len(got), tc.wantLen)
			case tc.want != nil && !slices.Equal(got, tc.want):
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestImageChainMatchesQemuImg checks the header reader against images that
// qemu-img made, and the chain against what qemu-img reports.
func TestImageChainMatchesQemuImg(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img not installed:", err)
	}
	root := realDir(t, t.TempDir())
	run := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command(qemuImg, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("qemu-img %v: %v\n%s", args, err, out)
		}
		return out
	}
	base := filepath.Join(root, "base.qcow2")
	run("create", "-q", "-f", "qcow2", base, "64M")
	if err := os.Mkdir(filepath.Join(root, "sb"), 0o755); err != nil {
		t.Fatal(err)
	}
	mid := filepath.Join(root, "sb", "snap1.qcow2")
	run("create", "-q", "-f", "qcow2", "-b", "../base.qcow2", "-F", "qcow2", mid)
	top := filepath.Join(root, "sb", "overlay.qcow2")
	run("create", "-q", "-f", "qcow2", "-b", mid, "-F", "qcow2", top)

	var info []struct {
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(run("info", "--backing-chain", "--output=json", top), &info); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, i := range info {
		want = append(want, filepath.Clean(i.Filename))
	}
	got, err := imageChain(top, false, []string{root})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v (qemu-img)", got, want)
	}
}

func realDir(t *testing.T, dir string) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return real
}
