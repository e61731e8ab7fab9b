package hostd

import (
	"fmt"
	"path/filepath"

	"github.com/agentbox/agentbox/snapshot/chunks"
)

// SnapshotStoreConfig makes hostd's pauses durable in an S3-compatible
// object store and lets it import sandboxes and snapshots other hosts put
// there (issue 40: portable snapshots).
type SnapshotStoreConfig struct {
	// URL is the store, "s3://bucket/prefix?endpoint=...&region=..."
	// (chunks.ParseURL); empty: no store (pauses are local).
	URL string
	// CredentialsFile holds the store's access key and secret key: two
	// lines, or KEY=VALUE lines (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
	// Empty: the environment's AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
	CredentialsFile string
	// CacheDir is the local chunk cache (default DataDir/chunks) and
	// CacheBytes its bound (0: chunks' default, 4 GiB).
	CacheDir   string
	CacheBytes int64
}

// On reports whether a store is configured.
func (c SnapshotStoreConfig) On() bool { return c.URL != "" }

// openSnapshotStore opens the configured store (nil, nil without one). It
// does not contact the store: a store that is down fails pauses, not the
// start.
func openSnapshotStore(c SnapshotStoreConfig, dataDir string, cfg Config) (*chunks.Store, error) {
	if !c.On() {
		return nil, nil
	}
	b, err := chunks.OpenS3(c.URL, c.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("hostd: --snapshot-store: %w", err)
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(dataDir, "chunks")
	}
	if c.CacheBytes < 0 {
		return nil, fmt.Errorf("hostd: --chunk-cache-bytes %d: want 0 (the default) or more", c.CacheBytes)
	}
	st, err := chunks.New(chunks.Config{Bucket: b, CacheDir: c.CacheDir, CacheBytes: c.CacheBytes, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("hostd: snapshot store: %w", err)
	}
	return st, nil
}
