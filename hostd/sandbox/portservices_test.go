package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/s3test"
)

// memServices is a ServiceRecordStore in memory.
type memServices struct {
	mu sync.Mutex
	m  map[string]ServiceRecords
}

func (s *memServices) ServiceRecords(id string) (ServiceRecords, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id], nil
}

func (s *memServices) SetServiceRecords(id string, r ServiceRecords) error {
	if err := r.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[id] = r
	return nil
}

func (s *memServices) Forget(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

func (s *memServices) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[id]
	return ok
}

// TestPortableServiceRecords: a sandbox's service records go with its
// durable pause to the manager that imports it; records out of bounds in
// the store refuse the import (ErrCorrupt) and nothing of it is made.
func TestPortableServiceRecords(t *testing.T) {
	s3 := s3test.Start(t, portableBucket)
	a, b := newEnv(t, withStore(portableStore(t, s3), "a")), newEnv(t, withStore(portableStore(t, s3), "b"))
	sa, sb := &memServices{m: map[string]ServiceRecords{}}, &memServices{m: map[string]ServiceRecords{}}
	a.m.SetServiceRecords(sa)
	b.m.SetServiceRecords(sb)
	ctx := context.Background()

	good := a.create(CreateOptions{})
	want := ServiceRecords{Public: []int{8001, 9000}, Token: "abt_tok", ShareKey: bytes.Repeat([]byte{7}, shareKeyLen)}
	sa.m[good.ID] = want
	if _, err := a.m.Pause(ctx, good.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.Resume(ctx, good.ID); err != nil {
		t.Fatal(err)
	}
	got := sb.m[good.ID]
	if got.Token != want.Token || !slices.Equal(got.Public, want.Public) || !bytes.Equal(got.ShareKey, want.ShareKey) {
		t.Fatalf("records on b: %+v, want %+v", got, want)
	}

	for name, r := range map[string]ServiceRecords{
		"short share key": {Token: "abt_tok", ShareKey: []byte{1, 2, 3}},
		"port 0":          {Token: "abt_tok", ShareKey: want.ShareKey, Public: []int{0}},
		"no token":        {ShareKey: want.ShareKey},
	} {
		bad := a.create(CreateOptions{})
		sa.m[bad.ID] = r
		if _, err := a.m.Pause(ctx, bad.ID); err != nil {
			t.Fatal(err)
		}
		_, err := b.m.Resume(ctx, bad.ID)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: resume on b: %v, want ErrCorrupt", name, err)
		}
		t.Logf("%s: %v", name, err)
		if _, err := b.m.Get(ctx, bad.ID); !errors.Is(err, ErrNotFound) || sb.has(bad.ID) {
			t.Fatalf("%s: after the refused import b has it: %v, records %v", name, err, sb.has(bad.ID))
		}
		if ents, _ := filepath.Glob(filepath.Join(b.data, "sandboxes", "*"+bad.ID+"*")); len(ents) != 0 {
			t.Fatalf("%s: after the refused import: %v", name, ents)
		}
		if _, err := os.Stat(filepath.Join(b.data, "sandboxes", bad.ID)); err == nil {
			t.Fatalf("%s: its directory is left", name)
		}
	}
	b.close()
	a.close()
}
