// Package mcp is `agentbox mcp`: a Model Context Protocol server (the
// official Go SDK) whose tools drive sandboxes through hostd's HTTP API
// (package client). It serves one session over stdio, or many over
// streamable HTTP (--http, API key required). Sandboxes a session creates
// are deleted when the session ends, unless the agent asked to keep them.
package mcp

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

// cleanupTimeout bounds the deletes at a session's end.
const cleanupTimeout = 2 * time.Minute

// session is one MCP session's state: the sandboxes it created.
type session struct {
	c   *client.Client
	log *slog.Logger

	mu    sync.Mutex
	owned map[string]bool // sandbox id -> keep
}

func newSession(c *client.Client, log *slog.Logger) *session {
	return &session{c: c, log: log, owned: map[string]bool{}}
}

func (s *session) own(id string, keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owned[id] = keep
}

func (s *session) disown(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.owned, id)
}

func (s *session) ownership(id string) (owned, keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep, owned = s.owned[id]
	return owned, keep
}

// cleanup deletes the sandboxes the session created and did not keep.
func (s *session) cleanup() {
	s.mu.Lock()
	var ids []string
	for id, keep := range s.owned {
		if !keep {
			ids = append(ids, id)
		}
	}
	s.owned = map[string]bool{}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, id := range ids {
		if err := s.c.DeleteSandbox(ctx, id); err != nil {
			var ae *client.APIError
			if !(asAPIError(err, &ae) && ae.Status == 404) {
				s.log.Warn("mcp: delete at session end", "sandbox_id", id, "err", err)
			}
		}
	}
}

// NewServer returns an MCP server for one session and the function that
// ends the session (deleting the sandboxes it did not keep).
func NewServer(c *client.Client, log *slog.Logger, opts *mcp.ServerOptions) (*mcp.Server, func()) {
	s := newSession(c, log)
	srv := mcp.NewServer(&mcp.Implementation{Name: "agentbox", Version: "0.1.0"}, opts)
	s.addTools(srv)
	return srv, s.cleanup
}
