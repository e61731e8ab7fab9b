// Package secrets keeps the credentials that the egress proxy injects. Values
// are sealed with AES-256-GCM under a key in hostd's data directory (mode
// 0600) before they reach the database, and are only ever opened for the
// proxy; nothing returns them over the API.
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/agentbox/agentbox/hostd/store"
)

// Errors.
var (
	ErrInvalid  = errors.New("secrets: invalid")
	ErrNotFound = errors.New("secrets: not found")
)

// KeyFile is the sealing key's file name in the data directory.
const KeyFile = "secrets.key"

// Store is the persistence of sealed secrets (hostd/store implements it).
type Store interface {
	PutSecret(ctx context.Context, name string, sealed []byte) error
	GetSecret(ctx context.Context, name string) ([]byte, error)
	ListSecrets(ctx context.Context) ([]store.SecretMeta, error)
	DeleteSecret(ctx context.Context, name string) error
}

var _ Store = (*store.Store)(nil)

// Box seals and opens secrets.
type Box struct {
	aead cipher.AEAD
	st   Store
}

// Open loads (or creates) the key in dataDir.
func Open(dataDir string, st Store) (*Box, error) {
	path := filepath.Join(dataDir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("secrets: key: %w", err)
		}
		_, werr := f.Write(key)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			return nil, fmt.Errorf("secrets: key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("secrets: key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("secrets: key %s: %d bytes, want 32", path, len(key))
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead, st: st}, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Put stores value under name (replacing an older value).
func (b *Box) Put(ctx context.Context, name string, value []byte) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("%w: name %q (letters, digits, _ . -; at most 128)", ErrInvalid, name)
	}
	if len(value) == 0 || len(value) > 64<<10 {
		return fmt.Errorf("%w: value must be 1 byte to 64 KiB", ErrInvalid)
	}
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	sealed := b.aead.Seal(nonce, nonce, value, []byte(name))
	return b.st.PutSecret(ctx, name, sealed)
}

// SecretValue opens the secret name (for the egress proxy only).
func (b *Box) SecretValue(ctx context.Context, name string) ([]byte, error) {
	sealed, err := b.st.GetSecret(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("secrets: %s: sealed value too short", name)
	}
	v, err := b.aead.Open(nil, sealed[:n], sealed[n:], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("secrets: %s: %w", name, err)
	}
	return v, nil
}

// List returns the secrets' names.
func (b *Box) List(ctx context.Context) ([]store.SecretMeta, error) { return b.st.ListSecrets(ctx) }

// Delete removes a secret.
func (b *Box) Delete(ctx context.Context, name string) error {
	err := b.st.DeleteSecret(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return err
}
