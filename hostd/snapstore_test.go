package hostd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/snapshot/chunks"
)

func TestReadCredentials(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, body, ak, sk string }{
		{"lines", "AKID\nSECRET\n", "AKID", "SECRET"},
		{"keys", "# the store\nAWS_ACCESS_KEY_ID=AKID\nAWS_SECRET_ACCESS_KEY = SECRET\n", "AKID", "SECRET"},
		{"one line", "AKID\n", "", ""},
		{"only the key", "AWS_ACCESS_KEY_ID=AKID\n", "", ""},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		ak, sk, err := chunks.ReadCredentials(p)
		if c.ak == "" {
			if err == nil {
				t.Errorf("%s: got %q %q, want an error", c.name, ak, sk)
			}
			continue
		}
		if err != nil || ak != c.ak || sk != c.sk {
			t.Errorf("%s: %q %q %v", c.name, ak, sk, err)
		}
	}
}

func TestOpenSnapshotStore(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	if st, err := openSnapshotStore(SnapshotStoreConfig{}, t.TempDir(), Config{}.WithDefaults()); st != nil || err != nil {
		t.Fatalf("no url: %v %v", st, err)
	}
	if _, err := openSnapshotStore(SnapshotStoreConfig{URL: "http://bucket/x"}, t.TempDir(), Config{}.WithDefaults()); err == nil {
		t.Fatal("an http:// url was taken")
	}
	dir := t.TempDir()
	st, err := openSnapshotStore(SnapshotStoreConfig{URL: "s3://bucket/fleet?endpoint=http://127.0.0.1:1&region=us-east-1"}, dir, Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := os.Stat(filepath.Join(dir, "chunks")); err != nil {
		t.Fatalf("the chunk cache is not in the data dir: %v", err)
	}
}
