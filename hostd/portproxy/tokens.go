package portproxy

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// Credential prefixes: a sandbox's access token, and a share link's token.
const (
	tokenPrefix = "abt_"
	sharePrefix = "abs_"
)

// keySize is the length of the HMAC key in DATA_DIR/portproxy.key.
const keySize = 32

// signer derives sandbox access tokens and signs share links with one
// HMAC-SHA256 key. Tokens are derived, not stored: a sandbox's token is
// the same across hostd restarts and dies with the key.
type signer struct {
	key []byte
	now func() time.Time
	// moved holds the credentials of sandboxes made on another host (nil:
	// none).
	moved *movedCreds
}

// loadKey reads the HMAC key at path, creating it (mode 0600) if missing.
func loadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != keySize {
			return nil, fmt.Errorf("portproxy: key %s has %d bytes, want %d", path, len(b), keySize)
		}
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("portproxy: read key: %w", err)
	}
	b = make([]byte, keySize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("portproxy: new key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("portproxy: create key: %w", err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("portproxy: write key: %w", err)
	}
	return b, nil
}

func (s *signer) mac(parts ...string) string { return macWith(s.key, parts...) }

func macWith(key []byte, parts ...string) string {
	return base64.RawURLEncoding.EncodeToString(rawMAC(key, parts...))
}

func rawMAC(key []byte, parts ...string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(strings.Join(parts, "\x00")))
	return h.Sum(nil)
}

// token is sandbox id's access token; it opens every port of the sandbox.
// A sandbox that moved here keeps the token its first host made.
func (s *signer) token(id string) string {
	if c, ok := s.moved.get(id); ok {
		return c.Token
	}
	return tokenPrefix + s.mac("token", id)
}

// shareKey is the key that signs sandbox id's share links: derived from
// the host's key for a sandbox made here, carried for one that moved (it
// goes with the sandbox; the host's key does not).
func (s *signer) shareKey(id string) []byte {
	if c, ok := s.moved.get(id); ok {
		return c.ShareKey
	}
	return rawMAC(s.key, "share-key", id)
}

// share returns a share-link token for sandbox id's port that expires at
// exp, minted by API key keyID ("" for none): abs_EXP.MAC, or
// abs_EXP.KEYID.MAC with the key's id signed in.
func (s *signer) share(id string, port int, exp time.Time, keyID string) string {
	return shareWith(s.shareKey(id), id, port, exp, keyID)
}

// legacyShare is share as links were signed before share keys (by the
// host's key itself), still accepted for sandboxes made here.
func (s *signer) legacyShare(id string, port int, exp time.Time, keyID string) string {
	return shareWith(s.key, id, port, exp, keyID)
}

func shareWith(key []byte, id string, port int, exp time.Time, keyID string) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	if keyID == "" {
		return sharePrefix + e + "." + macWith(key, "share", id, strconv.Itoa(port), e)
	}
	return sharePrefix + e + "." + keyID + "." + macWith(key, "share", id, strconv.Itoa(port), e, keyID)
}

// verdict is what a presented credential is worth.
type verdict int

const (
	invalid verdict = iota
	valid
	expired // a genuine share link past its expiry
)

// check judges credential cred for sandbox id's port. For a valid share
// link it also returns the expiry.
func (s *signer) check(cred, id string, port int) (verdict, time.Time) {
	v, exp, _ := s.checkShare(cred, id, port)
	return v, exp
}

// checkShare is check that also returns the id of the key that minted a
// share link ("" for none).
func (s *signer) checkShare(cred, id string, port int) (verdict, time.Time, string) {
	switch {
	case strings.HasPrefix(cred, tokenPrefix):
		if hmac.Equal([]byte(cred), []byte(s.token(id))) {
			return valid, time.Time{}, ""
		}
	case strings.HasPrefix(cred, sharePrefix):
		parts := strings.Split(strings.TrimPrefix(cred, sharePrefix), ".")
		unix, err := strconv.ParseInt(parts[0], 10, 64)
		if len(parts) < 2 || len(parts) > 3 || err != nil {
			return invalid, time.Time{}, ""
		}
		keyID := ""
		if len(parts) == 3 {
			keyID = parts[1]
		}
		exp := time.Unix(unix, 0)
		if !hmac.Equal([]byte(cred), []byte(s.share(id, port, exp, keyID))) {
			if _, moved := s.moved.get(id); moved || !hmac.Equal([]byte(cred), []byte(s.legacyShare(id, port, exp, keyID))) {
				return invalid, time.Time{}, ""
			}
		}
		if !s.now().Before(exp) {
			return expired, exp, keyID
		}
		return valid, exp, keyID
	}
	return invalid, time.Time{}, ""
}
