package gateway

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/store"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// sealer seals secrets at rest with AES-256-GCM under a key from the
// environment; the database holds only nonce and ciphertext.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) == 0 {
		return nil, nil
	}
	if len(key) < 16 {
		return nil, errors.New("gateway: the secrets key must be at least 16 bytes")
	}
	k := sha256.Sum256(key) // any length of key material gives a 256-bit key
	b, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: a}, nil
}

func (s *sealer) seal(name string, v []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, v, []byte(name))
}

func (s *sealer) open(name string, b []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(b) < n {
		return nil, errors.New("gateway: sealed secret too short")
	}
	v, err := s.aead.Open(nil, b[:n], b[n:], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("gateway: secret %s does not open with this secrets key: %w", name, err)
	}
	return v, nil
}

// syncedSecrets remembers which host epochs hold the current secrets.
type syncedSecrets struct {
	mu  sync.Mutex
	gen int
	at  map[string]int // host@epoch → gen
}

func (s *syncedSecrets) changed() {
	s.mu.Lock()
	s.gen++
	s.mu.Unlock()
}

// secrets routes /v1/secrets[/{name}].
func (g *Gateway) secrets(w http.ResponseWriter, r *http.Request, rest []string) string {
	if g.seal == nil {
		g.writeError(w, errorf(http.StatusNotImplemented, CodeInvalid, "this fleet keeps no secrets: start the gateway with a secrets key (AGENTBOX_SECRETS_KEY)"))
		return "secrets"
	}
	project := caller(r.Context()).Project
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		dctx, cancel := g.dbctx(r.Context())
		defer cancel()
		list, err := g.st.Secrets(dctx, project)
		if err != nil {
			g.writeError(w, err)
			return "secrets"
		}
		out := apitypes.SecretList{Secrets: []apitypes.SecretInfo{}}
		for _, s := range list {
			out.Secrets = append(out.Secrets, apitypes.SecretInfo{Name: s.Name, CreatedAt: s.Created})
		}
		writeJSON(w, http.StatusOK, out)
	case len(rest) == 0 && r.Method == http.MethodPost:
		g.createSecret(w, r, project)
	case len(rest) == 1 && r.Method == http.MethodDelete:
		g.deleteSecret(w, r, project, rest[0])
	default:
		g.writeError(w, errorf(http.StatusMethodNotAllowed, CodeInvalid, "method %s not allowed", r.Method))
	}
	return "secrets"
}

func (g *Gateway) createSecret(w http.ResponseWriter, r *http.Request, project string) {
	var req apitypes.CreateSecretRequest
	if err := decode(r, &req); err != nil {
		g.writeError(w, err)
		return
	}
	if req.Name == "" || len(req.Value) == 0 || len(req.Value) > 64<<10 {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "a secret needs a name and a value of 1 byte to 64 KiB"))
		return
	}
	dctx, cancel := g.dbctx(r.Context())
	defer cancel()
	sec := store.Secret{Name: req.Name, Project: project, Sealed: g.seal.seal(req.Name, []byte(req.Value))}
	if err := g.st.PutSecret(dctx, sec); err != nil {
		g.writeError(w, err)
		return
	}
	g.synced.changed()
	writeJSON(w, http.StatusCreated, apitypes.SecretInfo{Name: req.Name})
}

func (g *Gateway) deleteSecret(w http.ResponseWriter, r *http.Request, project, name string) {
	dctx, cancel := g.dbctx(r.Context())
	defer cancel()
	list, err := g.st.Secrets(dctx, project)
	if err != nil {
		g.writeError(w, err)
		return
	}
	found := false
	for _, s := range list {
		found = found || s.Name == name
	}
	if !found {
		g.writeError(w, errorf(http.StatusNotFound, "secret_not_found", "secret not found: %s", name))
		return
	}
	if err := g.st.DeleteSecret(dctx, name); err != nil {
		g.writeError(w, err)
		return
	}
	g.synced.changed()
	hosts, _ := g.liveHosts(r.Context())
	for _, h := range hosts {
		_, _, _ = g.fwd.call(r.Context(), h.Name, h.Addr, http.MethodDelete, "/v1/secrets/"+name, nil, http.Header{}, 1<<16)
	}
	w.WriteHeader(http.StatusNoContent)
}

// syncSecrets gives host the fleet's secrets before a sandbox starts there
// (once per host epoch and change of the secrets): egress injects them on
// the host, the VM never sees them.
func (g *Gateway) syncSecrets(ctx context.Context, h store.Host) error {
	if g.seal == nil {
		return nil
	}
	at := fmt.Sprintf("%s@%d", h.Name, h.Epoch)
	g.synced.mu.Lock()
	gen := g.synced.gen
	synced, ok := g.synced.at[at]
	done := ok && synced == gen
	g.synced.mu.Unlock()
	if done {
		return nil
	}
	dctx, cancel := g.dbctx(ctx)
	list, err := g.st.Secrets(dctx, "")
	cancel()
	if err != nil {
		return err
	}
	for _, s := range list {
		v, err := g.seal.open(s.Name, s.Sealed)
		if err != nil {
			return err
		}
		// hostd keeps one value per name: replace what it has.
		_, _, _ = g.fwd.call(ctx, h.Name, h.Addr, http.MethodDelete, "/v1/secrets/"+s.Name, nil, http.Header{}, 1<<16)
		body, _ := json.Marshal(apitypes.CreateSecretRequest{Name: s.Name, Value: string(v)})
		resp, out, err := g.fwd.call(ctx, h.Name, h.Addr, http.MethodPost, "/v1/secrets", body, http.Header{}, 1<<16)
		if err != nil {
			return err
		}
		if resp.StatusCode/100 != 2 {
			return errorf(http.StatusBadGateway, CodeHostUnavailable, "host %s refused secret %s: %s", h.Name, s.Name, truncate(out))
		}
	}
	g.synced.mu.Lock()
	if g.synced.at == nil {
		g.synced.at = map[string]int{}
	}
	g.synced.at[at] = gen
	g.synced.mu.Unlock()
	return nil
}
