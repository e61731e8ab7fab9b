package auth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/hostd/store"
)

// KeyFile is the name of the key file in hostd's data directory.
const KeyFile = "api-key"

// Bootstrap makes sure hostd has a key that its operator can use, and
// returns it:
//   - envKey, if set (AGENTBOX_API_KEY), is stored and returned;
//   - otherwise the key in dataDir/api-key is stored (if it was not) and returned;
//   - otherwise a new key is made, stored, and written to dataDir/api-key
//     with mode 0600, atomically.
//
// Only hashes reach the store. When the store keeps key records
// (BootstrapStore), the key is an admin key of the default project marked
// as the bootstrap key, and the previous bootstrap key (an old file or env
// key) is revoked: replacing the file or the env key rotates the key.
func Bootstrap(ctx context.Context, ks KeyStore, dataDir, envKey string) (string, error) {
	if envKey = strings.TrimSpace(envKey); envKey != "" {
		if err := addBootstrap(ctx, ks, "env", envKey); err != nil {
			return "", fmt.Errorf("auth: bootstrap: %w", err)
		}
		return envKey, nil
	}
	path := filepath.Join(dataDir, KeyFile)
	key, err := readKeyFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if key, err = NewKey(); err != nil {
			return "", err
		}
		// Store first: a key in the file must always be accepted.
		if err := addBootstrap(ctx, ks, KeyFile, key); err != nil {
			return "", fmt.Errorf("auth: bootstrap: %w", err)
		}
		if err := writeFileAtomic(path, []byte(key+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("auth: bootstrap: %w", err)
		}
		return key, nil
	case err != nil:
		return "", fmt.Errorf("auth: bootstrap: %w", err)
	}
	if err := addBootstrap(ctx, ks, KeyFile, key); err != nil {
		return "", fmt.Errorf("auth: bootstrap: %w", err)
	}
	return key, nil
}

// BootstrapStore marks bootstrap keys (*store.Store implements it).
type BootstrapStore interface {
	// AddBootstrapKey stores rec under hash as the bootstrap key and
	// revokes the previous one.
	AddBootstrapKey(ctx context.Context, rec store.APIKey, hash string) error
}

func addBootstrap(ctx context.Context, ks KeyStore, name, key string) error {
	bs, ok := ks.(BootstrapStore)
	if !ok {
		return ks.AddAPIKey(ctx, name, Hash(key))
	}
	h := Hash(key)
	rec := store.APIKey{ID: BootstrapID(key), Name: name, Prefix: VisiblePrefix(key), CreatedAt: time.Now().UTC()}
	return bs.AddBootstrapKey(ctx, rec, h)
}

// BootstrapID is the id of bootstrap key key: made of its hash, as the
// store's migration names the keys it found.
func BootstrapID(key string) string { return "key_" + Hash(key)[:16] }

// Rotate makes a new bootstrap key, stores it (revoking the previous
// bootstrap key) and writes it to dataDir/api-key, and returns it. The key
// is stored before the file is written, so the file's key is always
// accepted; a failed write leaves the new key only in the answer.
func Rotate(ctx context.Context, ks KeyStore, dataDir string) (string, error) {
	key, err := NewKey()
	if err != nil {
		return "", err
	}
	if err := addBootstrap(ctx, ks, KeyFile, key); err != nil {
		return "", fmt.Errorf("auth: rotate: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dataDir, KeyFile), []byte(key+"\n"), 0o600); err != nil {
		return key, fmt.Errorf("auth: rotate: %w", err)
	}
	return key, nil
}

func readKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("%s is empty; delete it to make a new key", path)
	}
	return key, nil
}

// writeFileAtomic writes data to a temporary file next to path and renames
// it over path, so readers see the old file or the whole new one.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			err = errors.Join(err, os.Remove(f.Name()))
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return errors.Join(err, f.Close())
	}
	if _, err := f.Write(data); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	renamed = true
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
