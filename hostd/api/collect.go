package api

import (
	"bufio"
	"encoding/base64"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"
)

// maxCollectedTotal bounds the output bytes that all collected execs of a
// hostd hold at once: past it, further output is dropped (truncated is
// set) until a running collected exec answers and gives its share back.
const maxCollectedTotal = 64 << 20

// outputBudget is the byte budget of collected output, shared by every
// collected exec of a server.
type outputBudget struct {
	mu   sync.Mutex
	left int
}

func newOutputBudget(n int) *outputBudget { return &outputBudget{left: n} }

// take grants up to n bytes.
func (b *outputBudget) take(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, b.left)
	b.left -= n
	return n
}

// give returns n granted bytes.
func (b *outputBudget) give(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += n
}

// collected is one output stream of a collected exec: the event payloads
// themselves, kept without copying, at most max bytes, within a budget.
type collected struct {
	chunks    [][]byte
	n, max    int
	budget    *outputBudget
	taken     int // of n, the bytes granted by the budget
	truncated bool
}

// collectFloor is what each collected stream keeps outside the shared
// budget: so that execs whose output floods the budget (a hostile guest's,
// say) cannot empty the small answers of every other sandbox.
const collectFloor = 64 << 10

func (c *collected) add(p []byte) {
	if room := c.max - c.n; len(p) > room {
		p, c.truncated = p[:room], true
	}
	free := min(len(p), max(0, collectFloor-c.n))
	got := c.budget.take(len(p) - free)
	c.taken += got
	if free+got < len(p) {
		p, c.truncated = p[:free+got], true
	}
	if len(p) > 0 {
		c.chunks = append(c.chunks, p)
		c.n += len(p)
	}
}

// release drops the chunks and gives their bytes back to the budget.
func (c *collected) release() {
	c.budget.give(c.taken)
	c.chunks, c.n, c.taken = nil, 0, 0
}

// writeExecResult answers with res, whose stdout and stderr come from the
// collected streams: encoded straight into the response, not built as one
// string and one JSON document first. The bytes are what encoding/json
// writes for the same ExecResult (TestWriteExecResultMatchesJSON).
func writeExecResult(w http.ResponseWriter, res ExecResult, stdout, stderr *collected) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("{")
	if res.ExecID != "" {
		bw.WriteString(`"exec_id":`)
		writeJSONString(bw, [][]byte{[]byte(res.ExecID)})
		bw.WriteString(",")
	}
	bw.WriteString(`"exit_code":` + strconv.Itoa(res.ExitCode))
	if res.Signal != "" {
		bw.WriteString(`,"signal":`)
		writeJSONString(bw, [][]byte{[]byte(res.Signal)})
	}
	writeOutput(bw, "stderr", stderr.chunks)
	writeOutput(bw, "stdout", stdout.chunks)
	if res.Truncated {
		bw.WriteString(`,"truncated":true`)
	}
	bw.WriteString("}\n")
	_ = bw.Flush() // the status is sent; an error means the client went away
}

// writeOutput writes one output stream's members: its text as name and,
// when the bytes are not valid UTF-8 (the text is not them), the bytes
// base64 as name_b64.
func writeOutput(w *bufio.Writer, name string, chunks [][]byte) {
	w.WriteString(`,"` + name + `":`)
	if writeJSONString(w, chunks) {
		return
	}
	w.WriteString(`,"` + name + `_b64":"`)
	enc := base64.NewEncoder(base64.StdEncoding, w)
	for _, p := range chunks {
		enc.Write(p)
	}
	enc.Close()
	w.WriteByte('"')
}

const hexDigits = "0123456789abcdef"

// writeJSONString writes the concatenation of chunks as one JSON string,
// escaped as encoding/json escapes a Go string (HTML-safe, U+2028 and
// U+2029 escaped, each byte of invalid UTF-8 as U+FFFD). A rune split
// across chunks is joined first. Hand-rolled: encoding/json has no
// streaming string encoder, and encoding each chunk with it would allocate
// a copy or two of every output byte. It reports whether the chunks were
// valid UTF-8 (the string is their bytes).
func writeJSONString(w *bufio.Writer, chunks [][]byte) (valid bool) {
	w.WriteByte('"')
	valid = true
	carry := make([]byte, 0, utf8.UTFMax) // the start of a rune split across chunks
	for _, p := range chunks {
		for len(carry) > 0 && len(p) > 0 {
			carry, p = append(carry, p[0]), p[1:]
			if utf8.FullRune(carry) {
				carry = carry[:copy(carry, escapeRunes(w, carry, false, &valid))]
			}
		}
		if len(p) > 0 {
			carry = append(carry[:0], escapeRunes(w, p, false, &valid)...)
		}
	}
	escapeRunes(w, carry, true, &valid)
	w.WriteByte('"')
	return valid
}

// escapeRunes writes p escaped and returns its tail that may be the start
// of a rune continued in the next chunk (none when last). It clears *valid
// at a byte that is not UTF-8.
func escapeRunes(w *bufio.Writer, p []byte, last bool, valid *bool) []byte {
	start := 0
	for i := 0; i < len(p); {
		b := p[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			w.Write(p[start:i])
			switch b {
			case '"', '\\':
				w.WriteByte('\\')
				w.WriteByte(b)
			case '\b':
				w.WriteString(`\b`)
			case '\f':
				w.WriteString(`\f`)
			case '\n':
				w.WriteString(`\n`)
			case '\r':
				w.WriteString(`\r`)
			case '\t':
				w.WriteString(`\t`)
			default:
				w.WriteString(`\u00`)
				w.WriteByte(hexDigits[b>>4])
				w.WriteByte(hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		if !last && !utf8.FullRune(p[i:]) {
			w.Write(p[start:i])
			return p[i:]
		}
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			w.Write(p[start:i])
			w.WriteString(`\ufffd`)
			*valid = false
		case r == '\u2028' || r == '\u2029':
			w.Write(p[start:i])
			w.WriteString(`\u202`)
			w.WriteByte(hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	w.Write(p[start:])
	return nil
}
