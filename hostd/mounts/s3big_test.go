package mounts

import (
	"bytes"
	"crypto/rand"
	"os"
	"testing"

	"github.com/agentbox/agentbox/internal/s3test"
)

// TestS3BigUpload: a file bigger than a part goes up in parts and comes back whole.
func TestS3BigUpload(t *testing.T) {
	srv := s3test.Start(t, "data")
	b, err := s3Config().openS3(t.Context(), Spec{Type: TypeS3, Endpoint: srv.Endpoint, Bucket: "data", Secret: "s3"}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	big := make([]byte, s3PartSize*2+12345)
	_, _ = rand.Read(big)
	if err := b.Create("big", 0o644, false); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(big); off += MaxIO {
		if _, err := b.WriteAt("big", big[off:min(off+MaxIO, len(big))], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush("big"); err != nil {
		t.Fatal(err)
	}
	got, err := srv.Get("data", "big")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
	ents, _ := os.ReadDir(b.tmp)
	if len(ents) != 0 {
		t.Errorf("temp files left: %d", len(ents))
	}
}
