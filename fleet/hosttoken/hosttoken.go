// Package hosttoken derives each host's token from the fleet's secret: the
// control plane calls a host's API with it, and the host accepts nothing
// else in fleet mode (a caller's API key never reaches a host). A host
// registers the token's hash; the control plane places no work on a host
// whose hash is not the one the secret gives for its name.
package hosttoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// MinSecretLen is the shortest fleet secret accepted.
const MinSecretLen = 16

// ErrWeakSecret is a fleet secret shorter than MinSecretLen.
var ErrWeakSecret = errors.New("hosttoken: the fleet secret must be at least 16 bytes")

// Token is host's token under secret.
func Token(secret []byte, host string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("agentbox host token\x00"))
	m.Write([]byte(host))
	return "abh_" + hex.EncodeToString(m.Sum(nil))
}

// Hash is the form in which a token is registered.
func Hash(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// Equal compares two tokens in constant time.
func Equal(a, b string) bool { return hmac.Equal([]byte(a), []byte(b)) }

// Secret returns the fleet secret: the value itself (env), or else the
// content of file, trimmed.
func Secret(value, file string) ([]byte, error) {
	s := value
	if s == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("hosttoken: fleet secret: %w", err)
		}
		s = string(b)
	}
	s = strings.TrimSpace(s)
	if len(s) < MinSecretLen {
		return nil, ErrWeakSecret
	}
	return []byte(s), nil
}
