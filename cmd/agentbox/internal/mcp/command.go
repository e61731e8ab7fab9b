package mcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// Command is `agentbox mcp`.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the Model Context Protocol: sandbox tools for an AI agent (stdio, or streamable HTTP with --http)",
		Description: "Over stdio (the default) one session is served; over --http ADDR each client session is its own.\n" +
			"Sandboxes a session creates are deleted when it ends unless the agent passed keep=true.\n" +
			"--http requires Authorization: Bearer KEY on every request (--http-key, default hostd's API key).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Usage: "serve streamable HTTP on `ADDR` (e.g. 127.0.0.1:7071) instead of stdio"},
			&cli.StringFlag{Name: "http-key", Usage: "the key HTTP clients must send (default: the API key)", Sources: cli.EnvVars("AGENTBOX_MCP_KEY")},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			key := cmd.String("api-key")
			if key == "" {
				var err error
				if key, err = client.LoadAPIKey(); err != nil {
					return err
				}
			}
			c, err := client.New(cmd.String("url"), key)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.Root().ErrWriter, nil))
			if addr := cmd.String("http"); addr != "" {
				httpKey := cmd.String("http-key")
				if httpKey == "" {
					httpKey = key
				}
				return ServeHTTP(ctx, addr, httpKey, c, log)
			}
			return ServeStdio(ctx, c, log, cmd.Root().Reader, cmd.Root().Writer)
		},
	}
}

// ServeStdio serves one session on in/out and ends it (deleting the
// sandboxes it did not keep) when in closes or ctx ends.
func ServeStdio(ctx context.Context, c *client.Client, log *slog.Logger, in io.Reader, out io.Writer) error {
	srv, end := NewServer(c, log, nil)
	defer end()
	err := srv.Run(ctx, &mcp.IOTransport{Reader: nopReadCloser{in}, Writer: nopWriteCloser{out}})
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}

type nopReadCloser struct{ io.Reader }

func (nopReadCloser) Close() error { return nil }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Handler serves MCP sessions over streamable HTTP, each request required
// to carry key as its bearer token. Close ends every session and waits for
// their cleanups.
type Handler struct {
	h    http.Handler
	key  []byte
	wg   sync.WaitGroup
	mu   sync.Mutex
	open []*mcp.ServerSession
}

// sessionIdle closes an HTTP session no request has used for this long.
const sessionIdle = 30 * time.Minute

// NewHandler returns the HTTP handler of `agentbox mcp --http`.
func NewHandler(key string, c *client.Client, log *slog.Logger) (*Handler, error) {
	if key == "" {
		return nil, errors.New("mcp: --http needs an API key")
	}
	h := &Handler{key: []byte(key)}
	h.h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		var end func()
		srv, end := NewServer(c, log, &mcp.ServerOptions{InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			h.track(req.Session, end)
		}})
		return srv
	}, &mcp.StreamableHTTPOptions{SessionTimeout: sessionIdle})
	return h, nil
}

// track runs end when ss ends.
func (h *Handler) track(ss *mcp.ServerSession, end func()) {
	h.mu.Lock()
	h.open = append(h.open, ss)
	h.mu.Unlock()
	h.wg.Go(func() {
		ss.Wait()
		end()
	})
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), h.key) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentbox-mcp"`)
		http.Error(w, "unauthorized: send Authorization: Bearer <API key>", http.StatusUnauthorized)
		return
	}
	h.h.ServeHTTP(w, r)
}

// Close ends the open sessions and waits until their sandboxes are cleaned up.
func (h *Handler) Close() {
	h.mu.Lock()
	open := h.open
	h.open = nil
	h.mu.Unlock()
	for _, ss := range open {
		ss.Close()
	}
	h.wg.Wait()
}

// ServeHTTP serves streamable HTTP on addr until ctx ends.
func ServeHTTP(ctx context.Context, addr, key string, c *client.Client, log *slog.Logger) error {
	h, err := NewHandler(key, c, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Info("agentbox mcp: streamable HTTP", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	h.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
