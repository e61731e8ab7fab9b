package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// diffProbe is the guest side of a diff: a python3 script that walks or
// stats guest paths and answers one JSON line per entry. It runs through
// the agent directly (not Execs), so it is no exec of the sandbox's: the
// flight recorder does not log it and `ps` does not list it.
//
//go:embed diffprobe.py
var diffProbe string

// Bounds of what a guest's probe may answer: a line, and the time it runs.
const (
	maxProbeLine = 1 << 20
	probeTimeout = 10 * time.Minute
)

// ErrNoProbe is a guest without python3, which the diff's probe runs on.
var ErrNoProbe = errors.New("sandbox: diff: the guest has no python3 to run the diff's probe")

// fileRec is one guest entry as the probe reports it. Path and Link are
// the guest's bytes.
type fileRec struct {
	Path    string
	Type    string // "f", "d", "l", "o"; "" when missing
	Mode    uint32
	UID     int
	GID     int
	Size    int64
	MTime   float64
	SHA256  string
	Link    string
	Missing bool
	// Journal marks a record known only from the flight recorder (a
	// paused side): no mode, owner or content.
	Journal bool
}

// probeLine is a probe's JSON line.
type probeLine struct {
	P    string  `json:"p"`
	T    string  `json:"t"`
	M    uint32  `json:"m"`
	U    int     `json:"u"`
	G    int     `json:"g"`
	S    int64   `json:"s"`
	MT   float64 `json:"mt"`
	H    string  `json:"h"`
	L    string  `json:"l"`
	X    bool    `json:"x"`
	End  bool    `json:"end"`
	More bool    `json:"more"`
}

// probeRequest is what the probe reads.
type probeRequest struct {
	Mode     string   `json:"mode"`
	Roots    []string `json:"roots,omitempty"`
	Excludes []string `json:"excludes,omitempty"`
	Since    float64  `json:"since,omitempty"`
	After    string   `json:"after,omitempty"`
	Limit    int      `json:"limit,omitempty"`
	Paths    []string `json:"paths,omitempty"`
	Lists    []string `json:"lists,omitempty"`
	DirsOnly bool     `json:"dirs_only,omitempty"`
}

func b64s(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = base64.StdEncoding.EncodeToString([]byte(s))
	}
	return out
}

// probe runs the probe in c's guest with req and calls emit for each entry
// in path order; more reports whether a walk stopped at its limit.
func probe(ctx context.Context, c *agentclient.Client, req probeRequest, emit func(fileRec) error) (more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return false, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	reqPath := "/run/agentbox-diff-" + hex.EncodeToString(rnd[:]) + ".json"
	if _, err := c.WriteFile(ctx, reqPath, 0o600, bytes.NewReader(body)); err != nil {
		return false, fmt.Errorf("sandbox: diff: write the probe's request: %w", err)
	}
	st, err := c.StartWait(ctx, agentclient.Command{Argv: []string{"python3", "-c", diffProbe, reqPath}, Forget: true}, 0, false)
	if errors.Is(err, agentclient.ErrStart) {
		_ = c.Remove(context.WithoutCancel(ctx), reqPath, false)
		return false, fmt.Errorf("%w: %w", ErrNoProbe, err)
	}
	if err != nil {
		return false, fmt.Errorf("sandbox: diff: start the probe: %w", err)
	}
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { // ends with the Follow: pw is closed below on every path
		done <- parseProbe(pr, emit, &more)
		_, _ = io.Copy(io.Discard, pr)
	}()
	out := func(o agentclient.Output) error {
		if o.Stderr {
			if stderr.Len() < 4096 {
				stderr.Write(o.Data)
			}
			return nil
		}
		_, err := pw.Write(o.Data)
		return err
	}
	var exit agentclient.Exit
	for _, o := range st.Output {
		if err = out(o); err != nil {
			break
		}
	}
	if err == nil && st.Exited {
		exit = st.Exit
	} else if err == nil {
		exit, err = c.Follow(ctx, st.ID, st.Next, out)
	}
	pw.CloseWithError(err)
	perr := <-done
	if err != nil {
		return false, fmt.Errorf("sandbox: diff: probe: %w", err)
	}
	if exit.Code != 0 || exit.Signal != "" {
		if exit.Code == 127 {
			return false, ErrNoProbe
		}
		return false, fmt.Errorf("sandbox: diff: the guest's probe failed (exit %d %s): %s", exit.Code, exit.Signal, bytes.TrimSpace(stderr.Bytes()))
	}
	return more, perr
}

// parseProbe reads the probe's lines from r, bounded, until its end line.
func parseProbe(r io.Reader, emit func(fileRec) error, more *bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxProbeLine)
	for sc.Scan() {
		var l probeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("sandbox: diff: a bad line from the guest's probe: %w", err)
		}
		if l.End {
			*more = l.More
			return nil
		}
		p, err := base64.StdEncoding.DecodeString(l.P)
		if err != nil {
			return fmt.Errorf("sandbox: diff: a bad path from the guest's probe: %w", err)
		}
		link, _ := base64.StdEncoding.DecodeString(l.L)
		rec := fileRec{Path: string(p), Type: l.T, Mode: l.M, UID: l.U, GID: l.G, Size: l.S, MTime: l.MT, SHA256: l.H, Link: string(link), Missing: l.X}
		if err := emit(rec); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("sandbox: diff: the guest's probe: %w", err)
	}
	return errors.New("sandbox: diff: the guest's probe ended without its end line")
}
