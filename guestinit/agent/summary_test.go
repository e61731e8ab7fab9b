package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

func TestStreamSummaryKeepsBothEnds(t *testing.T) {
	for _, size := range []int{0, 10, summaryKeep, summaryKeep + 1, 3*summaryKeep + 17, 10 * summaryKeep} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		s := newStreamSummary()
		for off := 0; off < len(data); off += 5000 {
			s.add(data[off:min(off+5000, len(data))])
		}
		p := s.proto()
		sum := sha256.Sum256(data)
		wantHead := data[:min(size, summaryKeep)]
		wantTail := data[min(size, summaryKeep):]
		if len(wantTail) > summaryKeep {
			wantTail = wantTail[len(wantTail)-summaryKeep:]
		}
		if p.TotalBytes != uint64(size) || p.Sha256 != hex.EncodeToString(sum[:]) || !bytes.Equal(p.Head, wantHead) || !bytes.Equal(p.Tail, wantTail) {
			t.Errorf("size %d: total %d head %d tail %d, want head %d tail %d", size, p.TotalBytes, len(p.Head), len(p.Tail), len(wantHead), len(wantTail))
		}
	}
}
