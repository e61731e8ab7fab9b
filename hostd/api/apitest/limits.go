package apitest

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// ExtendTimeout sets the fake sandbox's deadline.
func (f *Manager) ExtendTimeout(ctx context.Context, id string, timeoutS int) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, ok := f.sandboxes[id]
	if !ok {
		return sandbox.Info{}, fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	}
	info.Deadline = time.Now().Add(time.Duration(timeoutS) * time.Second)
	f.sandboxes[id] = info
	return info, nil
}

// Usage reports zero usage of a known sandbox.
func (f *Manager) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[id]; !ok {
		return sandbox.Usage{}, fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	}
	return sandbox.Usage{}, nil
}
