package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// Defaults used by FromEnv.
const (
	DefaultURL     = "http://127.0.0.1:7070"
	DefaultDataDir = "/var/lib/agentbox"
	// KeyFile is the name of hostd's key file in its data directory.
	KeyFile = "api-key"
)

// ErrNoAPIKey is returned by LoadAPIKey and FromEnv when no key is set.
var ErrNoAPIKey = errors.New("client: no API key")

// APIError is an error answered by the API.
type APIError struct {
	// Status is the HTTP status, or 0 for an error that ended an exec stream.
	Status int
	// Code is the API's stable error code (e.g. "sandbox_not_found").
	Code string
	// Message is for humans.
	Message string
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("agentbox: %s (%s)", e.Message, e.Code)
	}
	return fmt.Sprintf("agentbox: %s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// Client talks to one hostd.
type Client struct {
	raw *Raw
}

// New returns a client of the hostd at baseURL (e.g. http://127.0.0.1:7070)
// that sends apiKey as a bearer token, and the W3C traceparent of the span
// in each call's ctx, if any.
func New(baseURL, apiKey string) (*Client, error) {
	return NewWithHTTPClient(baseURL, apiKey, &http.Client{}) // no overall timeout: exec and files stream
}

// NewWithHTTPClient is New with the HTTP client its calls go through (its
// transport's TLS settings, say).
func NewWithHTTPClient(baseURL, apiKey string, hc *http.Client) (*Client, error) {
	raw, err := NewClient(baseURL,
		WithHTTPClient(hc),
		WithRequestEditorFn(func(ctx context.Context, req *http.Request) error {
			if apiKey != "" {
				req.Header.Set("Authorization", "Bearer "+apiKey)
			}
			req.Header.Set("User-Agent", "agentbox-go-client")
			// The caller's trace, if ctx carries a span (OpenTelemetry):
			// hostd's events then carry its trace id.
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{raw: raw}, nil
}

// FromEnv returns a client configured from the environment: AGENTBOX_URL
// (default DefaultURL) and the key from LoadAPIKey.
func FromEnv() (*Client, error) {
	key, err := LoadAPIKey()
	if err != nil {
		return nil, err
	}
	url := os.Getenv("AGENTBOX_URL")
	if url == "" {
		url = DefaultURL
	}
	return New(url, key)
}

// LoadAPIKey returns AGENTBOX_API_KEY, or else the key in hostd's key file,
// $AGENTBOX_DATA_DIR/api-key (default /var/lib/agentbox/api-key).
func LoadAPIKey() (string, error) {
	if key := strings.TrimSpace(os.Getenv("AGENTBOX_API_KEY")); key != "" {
		return key, nil
	}
	dir := os.Getenv("AGENTBOX_DATA_DIR")
	if dir == "" {
		dir = DefaultDataDir
	}
	path := filepath.Join(dir, KeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: set AGENTBOX_API_KEY or AGENTBOX_DATA_DIR (no %s)", ErrNoAPIKey, path)
	}
	if err != nil {
		return "", fmt.Errorf("client: read API key: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrNoAPIKey, path)
	}
	return key, nil
}

// Raw returns the generated client, for calls the wrapper does not cover.
func (c *Client) Raw() *Raw { return c.raw }

// Health returns GET /healthz (no key needed).
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := decode(c.raw.GetHealth(ctx))(http.StatusOK, &h)
	return h, err
}

// CreateSandbox creates and boots a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (Sandbox, error) {
	var sb Sandbox
	err := decode(c.raw.CreateSandbox(ctx, req))(http.StatusCreated, &sb)
	return sb, err
}

// GetSandbox describes a sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := decode(c.raw.GetSandbox(ctx, id))(http.StatusOK, &sb)
	return sb, err
}

// ListSandboxes lists the sandboxes, oldest first.
func (c *Client) ListSandboxes(ctx context.Context) ([]Sandbox, error) {
	var list SandboxList
	err := decode(c.raw.ListSandboxes(ctx, nil))(http.StatusOK, &list)
	return list.Sandboxes, err
}

// DeleteSandbox stops a sandbox and deletes everything it owned.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return decode(c.raw.DeleteSandbox(ctx, id))(http.StatusNoContent, nil)
}

// Exec runs a command and returns its collected output (each stream cut at
// 16 MiB, see ExecResult.Truncated). A non-zero exit is not an error.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	err := decode(c.raw.ExecCommand(ctx, id, nil, req))(http.StatusOK, &res)
	return res, err
}

// Signal sends a signal ("SIGTERM", "TERM" or "15") to a running command.
func (c *Client) Signal(ctx context.Context, id, execID, signal string) error {
	return decode(c.raw.SignalExec(ctx, id, execID, SignalRequest{Signal: signal}))(http.StatusNoContent, nil)
}

// decode returns a function that checks resp's status against want and
// decodes its JSON body into out (nil: discard), or turns it into an
// *APIError. It closes the body. It is curried so that a generated call's
// two results can be passed straight in.
func decode(resp *http.Response, err error) func(want int, out any) error {
	return func(want int, out any) error {
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != want {
			return readAPIError(resp)
		}
		if out == nil {
			return nil
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("client: decode %s response: %w", resp.Request.URL.Path, err)
		}
		return nil
	}
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// readAPIError turns a non-success response into an *APIError.
func readAPIError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e Error
	if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
		return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &APIError{Status: resp.StatusCode, Code: "http_error", Message: msg}
}
