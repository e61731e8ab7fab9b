// Package logtest is a slog handler for tests that check what code logs:
// it counts records by level and tells when a record with a given
// message arrives. It keeps no records.
package logtest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Counter is a slog.Handler that counts the records of each level and
// closes the channel Seen(msg) returned the first time a record says msg.
type Counter struct {
	warns atomic.Int64
	mu    sync.Mutex
	seen  map[string]chan struct{}
}

// Warns is how many records of level warn arrived.
func (c *Counter) Warns() int64 { return c.warns.Load() }

// Seen returns a channel closed once a record with message msg arrives
// (call it before the code under test logs).
func (c *Counter) Seen(msg string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]chan struct{}{}
	}
	ch, ok := c.seen[msg]
	if !ok {
		ch = make(chan struct{})
		c.seen[msg] = ch
	}
	return ch
}

// Enabled is true at every level.
func (c *Counter) Enabled(context.Context, slog.Level) bool { return true }

// Handle counts r and signals its message.
func (c *Counter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		c.warns.Add(1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.seen[r.Message]; ok {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	return nil
}

// WithAttrs returns c: attributes are not counted.
func (c *Counter) WithAttrs([]slog.Attr) slog.Handler { return c }

// WithGroup returns c.
func (c *Counter) WithGroup(string) slog.Handler { return c }
