package auth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
// Only hashes reach the store.
func Bootstrap(ctx context.Context, ks KeyStore, dataDir, envKey string) (string, error) {
	if envKey = strings.TrimSpace(envKey); envKey != "" {
		if err := ks.AddAPIKey(ctx, "env", Hash(envKey)); err != nil {
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
		if err := ks.AddAPIKey(ctx, KeyFile, Hash(key)); err != nil {
			return "", fmt.Errorf("auth: bootstrap: %w", err)
		}
		if err := writeFileAtomic(path, []byte(key+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("auth: bootstrap: %w", err)
		}
		return key, nil
	case err != nil:
		return "", fmt.Errorf("auth: bootstrap: %w", err)
	}
	if err := ks.AddAPIKey(ctx, KeyFile, Hash(key)); err != nil {
		return "", fmt.Errorf("auth: bootstrap: %w", err)
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
