package sandbox

import (
	"fmt"
	"sync/atomic"
)

// Bounds of a moved sandbox's service records (they come from the
// snapshot store, which another host wrote).
const (
	maxMovedPublicPorts = 65535 // every port, once
	maxMovedTokenLen    = 128
	shareKeyLen         = 32
)

// ServiceRecords are a sandbox's service-URL records that go with it to
// another host, so that its URLs, token and share links work there.
type ServiceRecords struct {
	// Public are the ports whose service URLs need no credential.
	Public []int `json:"public,omitempty"`
	// Token is the sandbox's access token.
	Token string `json:"token"`
	// ShareKey signs the sandbox's share links (shareKeyLen bytes).
	ShareKey []byte `json:"share_key"`
}

// Validate refuses records out of bounds (ErrInvalid).
func (r ServiceRecords) Validate() error {
	if len(r.Public) > maxMovedPublicPorts {
		return fmt.Errorf("%w: %d public ports, over %d", ErrInvalid, len(r.Public), maxMovedPublicPorts)
	}
	var seen [65536]bool
	for _, p := range r.Public {
		if p < 1 || p > 65535 || seen[p] {
			return fmt.Errorf("%w: public port %d", ErrInvalid, p)
		}
		seen[p] = true
	}
	if r.Token == "" || len(r.Token) > maxMovedTokenLen {
		return fmt.Errorf("%w: an access token of %d bytes", ErrInvalid, len(r.Token))
	}
	if len(r.ShareKey) != shareKeyLen {
		return fmt.Errorf("%w: a share-link key of %d bytes, want %d", ErrInvalid, len(r.ShareKey), shareKeyLen)
	}
	return nil
}

// ServiceRecordStore keeps sandboxes' service records (portproxy.Proxy).
type ServiceRecordStore interface {
	ServiceRecords(id string) (ServiceRecords, error)
	// SetServiceRecords makes a sandbox that moved here keep r.
	SetServiceRecords(id string, r ServiceRecords) error
	// Forget drops every record of a sandbox.
	Forget(id string) error
}

// services holds the manager's ServiceRecordStore (set after New: the
// proxy is made on the manager).
type services struct {
	p atomic.Pointer[ServiceRecordStore]
}

func (s *services) get() ServiceRecordStore {
	if p := s.p.Load(); p != nil {
		return *p
	}
	return nil
}

// SetServiceRecords gives the manager the store of its sandboxes' service
// records: with a snapshot store, a paused sandbox's go with it to the
// host that resumes it.
func (m *Manager) SetServiceRecords(s ServiceRecordStore) { m.services.p.Store(&s) }
