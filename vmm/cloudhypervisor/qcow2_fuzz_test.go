package cloudhypervisor

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzQcowHeader feeds the qcow2 header check any file: it never panics,
// calls a file qcow2 only by its magic, and a backing name it returns is
// bounded, free of NUL and really stored in the file (as is the backing
// format it reports).
func FuzzQcowHeader(f *testing.F) {
	dir := f.TempDir()
	for i, s := range []qcowSpec{{}, {backing: "base.qcow2", backingFormat: "qcow2"}, {version: 2, backing: "/abs/base"},
		{backing: "raw.img", backingFormat: "raw"}, {dataFile: true}} {
		p := filepath.Join(dir, "seed"+string(rune('a'+i)))
		writeQcow2(f, p, s)
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("QFI\xfb"))
	f.Add([]byte("QFI\xfb\x00\x00\x00\x03"))
	f.Add([]byte("not a qcow2 image at all"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "img")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		h, isQcow, err := readQcowHeader(p)
		magic := len(data) >= 4 && binary.BigEndian.Uint32(data) == qcowMagic
		if isQcow != magic {
			t.Fatalf("isQcow %v for a file whose magic is %v", isQcow, magic)
		}
		if !isQcow && h.backing != "" {
			t.Fatalf("backing %q without qcow2", h.backing)
		}
		if err != nil || !isQcow {
			return // imageChain refuses the image on err
		}
		if len(h.backing) > qcowMaxBackingLen || strings.IndexByte(h.backing, 0) >= 0 {
			t.Fatalf("backing name %q", h.backing)
		}
		if h.backing != "" && !bytes.Contains(data, []byte(h.backing)) {
			t.Fatalf("backing name %q is not in the file", h.backing)
		}
		if h.backingFormat != "" && !bytes.Contains(data, []byte(h.backingFormat)) {
			t.Fatalf("backing format %q is not in the file", h.backingFormat)
		}
	})
}
