package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// TestWriteExecResultMatchesJSON: the streamed encoding is byte for byte
// what encoding/json writes, however the output is cut into chunks (runes
// split across chunks, invalid UTF-8 with its bytes in *_b64, HTML and
// control characters).
func TestWriteExecResultMatchesJSON(t *testing.T) {
	var all []byte
	for b := range 256 {
		all = append(all, byte(b))
	}
	samples := []string{"", "plain", "<a href=\"x\">&amp;</a>\n\t\r\b\f\x00\x1f\x7f", "h\u00e9llo \u4e16\u754c \U0001F600 \u2028\u2029",
		"bad \xff\xfe \xe2\x82 \xe2\x82\xac \xed\xa0\x80 \xf0\x9f\x98", string(all), strings.Repeat("\u20ac", 1000)}
	for _, s := range samples {
		for _, size := range []int{1, 2, 3, 5, 7, 64, 1 << 20} {
			out := chunked([]byte(s), size)
			res := ExecResult{ExecID: "e1", ExitCode: -1, Signal: "SIGKILL", Truncated: true}
			up := strings.ToUpper(s)
			want, _ := json.Marshal(ExecResult{ExecID: res.ExecID, ExitCode: res.ExitCode, Signal: res.Signal, Truncated: true,
				Stdout: s, StdoutB64: invalidBytes(s), Stderr: up, StderrB64: invalidBytes(up)})
			rec := &bodyRecorder{header: http.Header{}}
			writeExecResult(rec, res, &collected{chunks: out}, &collected{chunks: chunked([]byte(up), size)})
			if got := bytes.TrimSuffix(rec.body.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
				t.Fatalf("chunks of %d of %q:\n got %s\nwant %s", size, s, got, want)
			}
		}
	}
}

// invalidBytes is s's bytes when they are not valid UTF-8 (an ExecResult's
// *_b64), else nil.
func invalidBytes(s string) []byte {
	if utf8.ValidString(s) {
		return nil
	}
	return []byte(s)
}

func chunked(b []byte, size int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(size, len(b))
		out, b = append(out, b[:n]), b[n:]
	}
	return out
}

type bodyRecorder struct {
	header http.Header
	body   bytes.Buffer
}

func (r *bodyRecorder) Header() http.Header         { return r.header }
func (r *bodyRecorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *bodyRecorder) WriteHeader(int)             {}

// TestCollectedExecMemoryIsBounded runs 4 concurrent collected execs of
// 20 MB stdout + 20 MB stderr (issue 16: hostd went from 33 to 662 MB). The
// output is held once, within one shared budget, and encoded without
// copies: hostd allocates a small fraction of the output, and every
// budget byte is given back afterwards.
func TestCollectedExecMemoryIsBounded(t *testing.T) {
	env := newTestEnv(t)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, shared by every event
	const perStream, execs = 20, 4
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"}); err != nil {
			return err
		}
		for i := range perStream {
			for _, typ := range []sandbox.EventType{sandbox.EventStdout, sandbox.EventStderr} {
				if err := emit(sandbox.ExecEvent{Type: typ, Data: chunk, Offset: uint64(i * len(chunk))}); err != nil {
					return err
				}
			}
		}
		return emit(sandbox.ExecEvent{Type: sandbox.EventExit})
	})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBefore := rssKiB(t)
	var wg sync.WaitGroup
	kept := make([]int, execs)
	for i := range execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec", strings.NewReader(`{"cmd":["big"]}`))
			defer resp.Body.Close()
			// Count the output without holding it: skip to the strings.
			br := bufio.NewReaderSize(resp.Body, 64<<10)
			n, _ := io.Copy(io.Discard, br)
			kept[i] = int(n)
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	total := 0
	for _, n := range kept {
		total += n
	}
	produced := execs * 2 * perStream * len(chunk)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("output produced %d MiB, answered %d MiB; allocated %d MiB; heap in use %d -> %d MiB; RSS %d -> %d MiB",
		produced>>20, total>>20, alloc>>20, before.HeapInuse>>20, after.HeapInuse>>20, rssBefore>>10, rssKiB(t)>>10)
	// Each stream keeps its floor outside the budget (and leaves that much
	// of the budget to the others).
	if total > maxCollectedTotal+execs*(4*collectFloor+4096) {
		t.Errorf("the answers hold %d bytes, more than the %d budget", total, maxCollectedTotal)
	}
	// Before the fix every collected byte was allocated about 5 times
	// over (buffer growth, String, the JSON document and its growth).
	if alloc > uint64(maxCollectedTotal) {
		t.Errorf("allocated %d MiB to answer %d MiB of output", alloc>>20, total>>20)
	}
	// Every share was given back: one exec alone gets its 2 x 16 MiB.
	var res ExecResult
	if err := json.NewDecoder(env.do(t, "POST", "/v1/sandboxes/sb1/exec", strings.NewReader(`{"cmd":["big"]}`)).Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != maxCollected || len(res.Stderr) != maxCollected || !res.Truncated {
		t.Errorf("alone: %d + %d bytes (truncated %v), want %d each: the budget was not given back", len(res.Stdout), len(res.Stderr), res.Truncated, maxCollected)
	}
}

// rssKiB is this process's resident set size (hostd's API runs in it).
func rssKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}
