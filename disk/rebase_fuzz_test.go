package disk

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzRebase feeds rebase any bytes as a fresh overlay: it never panics,
// and what it accepts comes back the same length with the new backing
// name where the header says, the rest of the first cluster zero.
func FuzzRebase(f *testing.F) {
	head := make([]byte, 1<<16)
	copy(head, "QFI\xfb\x00\x00\x00\x03")
	binary.BigEndian.PutUint64(head[8:], 528)
	binary.BigEndian.PutUint32(head[16:], 5)
	binary.BigEndian.PutUint32(head[20:], 16)
	copy(head[528:], "/a/b1")
	f.Add(head, "/sn-1/disk.qcow2")
	f.Add([]byte("QFI\xfb"), "/x")
	f.Fuzz(func(t *testing.T, fresh []byte, base string) {
		out, err := rebase(fresh, base)
		if err != nil {
			return
		}
		off := binary.BigEndian.Uint64(out[8:16])
		n := binary.BigEndian.Uint32(out[16:20])
		cluster := uint64(1) << binary.BigEndian.Uint32(out[20:24])
		if len(out) != len(fresh) || int(n) != len(base) || string(out[off:off+uint64(n)]) != base ||
			len(bytes.TrimLeft(out[off+uint64(n):cluster], "\x00")) != 0 {
			t.Fatalf("rebase(%d bytes, %q) gave a wrong overlay", len(fresh), base)
		}
	})
}
