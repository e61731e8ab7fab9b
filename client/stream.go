package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Event is one event of a streamed exec: start, stdout, stderr or exit.
// Data holds decoded output bytes.
type Event = ExecEvent

// maxEventLine bounds one NDJSON line: the server sends at most 1 MiB of
// output per event, 1.4 MiB once base64-encoded.
const maxEventLine = 4 << 20

// ExecStream runs a command and calls fn for each event as it arrives, in
// order: start, stdout/stderr..., exit. It returns nil after fn has seen
// the exit event, fn's error if fn fails (which ends the stream), or the
// error that ended the stream (an *APIError with Status 0 if hostd reported
// it inside the stream, for example code "sandbox_deleted").
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, fn func(Event) error) error {
	resp, err := c.raw.ExecCommand(ctx, id, &ExecCommandParams{Stream: true}, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	return readEvents(resp.Body, fn)
}

// readEvents parses NDJSON events from r until exit or error.
func readEvents(r io.Reader, fn func(Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("client: bad exec event: %w", err)
		}
		if ev.Type == ExecEventTypeKeepalive {
			continue
		}
		if ev.Type == ExecEventTypeError {
			if ev.Error == nil {
				return &APIError{Code: "internal", Message: "exec stream failed"}
			}
			return &APIError{Code: ev.Error.Code, Message: ev.Error.Message}
		}
		if err := fn(ev); err != nil {
			return err
		}
		if ev.Type == ExecEventTypeExit {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("client: exec stream: %w", err)
	}
	return fmt.Errorf("client: exec stream ended before exit: %w", io.ErrUnexpectedEOF)
}
