package portproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// movedCreds are the service-URL credentials of sandboxes that moved here
// from another host (imported from a snapshot store): their access token
// and share-link key as the first host made them, so that the URLs and
// links handed out there open here. Kept in a small JSON file so they
// survive a restart; a sandbox made here is not in it.
type movedCreds struct {
	path string

	mu sync.Mutex
	m  map[string]movedCred
}

type movedCred struct {
	Token    string `json:"token"`
	ShareKey []byte `json:"share_key"`
}

func loadMoved(path string) (*movedCreds, error) {
	c := &movedCreds{path: path, m: map[string]movedCred{}}
	if err := readJSONFile(path, "moved credentials", &c.m); err != nil {
		return nil, err
	}
	return c, nil
}

// get is sandbox id's moved credentials (false for a sandbox made here).
func (c *movedCreds) get(id string) (movedCred, bool) {
	if c == nil {
		return movedCred{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[id]
	return v, ok
}

// set records (or, with a zero cred, drops) sandbox id's credentials.
func (c *movedCreds) set(id string, v movedCred, drop bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; drop && !ok {
		return nil
	}
	next := maps.Clone(c.m)
	if drop {
		delete(next, id)
	} else {
		next[id] = v
	}
	if err := writeJSONFile(c.path, ".moved-credentials-*", next); err != nil {
		return err
	}
	c.m = next
	return nil
}

// tokenRE is the form of an access token this package derives.
var tokenRE = regexp.MustCompile(`^` + tokenPrefix + `[A-Za-z0-9_-]{43}$`)

// ServiceRecords are sandbox id's service-URL records that go with it to
// another host: its public ports, access token and share-link key.
func (p *Proxy) ServiceRecords(id string) (sandbox.ServiceRecords, error) {
	p.public.mu.Lock()
	pub := slices.Clone(p.public.ports[id])
	p.public.mu.Unlock()
	return sandbox.ServiceRecords{Public: pub, Token: p.sign.token(id), ShareKey: p.sign.shareKey(id)}, nil
}

// SetServiceRecords makes sandbox id, moved here, keep the records r its
// first host made: the same token, the same public ports, and its share
// links open here. A record of the wrong form is refused (sandbox.ErrInvalid).
func (p *Proxy) SetServiceRecords(id string, r sandbox.ServiceRecords) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if !tokenRE.MatchString(r.Token) {
		return fmt.Errorf("%w: the access token is not one of this kind", sandbox.ErrInvalid)
	}
	if err := p.sign.moved.set(id, movedCred{Token: r.Token, ShareKey: r.ShareKey}, false); err != nil {
		return err
	}
	if err := p.public.forget(id); err != nil {
		return err
	}
	for _, port := range r.Public {
		if err := p.public.set(id, port, true); err != nil {
			return err
		}
	}
	return nil
}

// readJSONFile decodes the JSON file at path (what names it in errors)
// into v; a file that does not exist leaves v as it is.
func readJSONFile(path, what string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("portproxy: read %s: %w", what, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("portproxy: parse %s: %w", path, err)
	}
	return nil
}

// writeJSONFile replaces the file at path with v's JSON atomically (mode
// 0600), through a temporary file named by pattern.
func writeJSONFile(path, pattern string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return fmt.Errorf("portproxy: write %s: %w", filepath.Base(path), err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Chmod(0o600), tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("portproxy: write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("portproxy: write %s: %w", filepath.Base(path), err)
	}
	return nil
}
