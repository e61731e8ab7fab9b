package gateway

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// A build's stream passes through byte for byte, read in any sizes, and
// its done event is seen once, past a log line longer than the bound.
func TestDoneWatcher(t *testing.T) {
	stream := `{"type":"log","line":"` + strings.Repeat("x", maxEventLine+10) + `"}` + "\n" +
		`{"type":"log","line":"{\"type\":\"done\"}"}` + "\n" +
		`{"type":"done","template":{"name":"t1"}}` + "\n" +
		`{"type":"done","template":{"name":"t1"}}` + "\n"
	for _, size := range []int{1, 7, 4096, len(stream)} {
		fired := 0
		d := &doneWatcher{rc: io.NopCloser(strings.NewReader(stream)), onDone: func() { fired++ }}
		var out bytes.Buffer
		buf := make([]byte, size)
		for {
			n, err := d.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				break
			}
		}
		if out.String() != stream {
			t.Fatalf("read size %d: the stream changed on its way through", size)
		}
		if fired != 1 {
			t.Fatalf("read size %d: done seen %d times, want 1", size, fired)
		}
	}
	for _, s := range []string{`{"type":"error","error":{"code":"build_failed"}}` + "\n", `{"type":"done"}` + "\n"} {
		fired := false
		d := &doneWatcher{rc: io.NopCloser(strings.NewReader(s)), onDone: func() { fired = true }}
		_, _ = io.ReadAll(d)
		if fired {
			t.Fatalf("%q: recorded a template that was not built", s)
		}
	}
	fired := false
	_, _ = io.ReadAll(&doneWatcher{rc: io.NopCloser(strings.NewReader(`{"type":"done","template":{"name":"t"}}`)), onDone: func() { fired = true }})
	if !fired {
		t.Fatal("a done event without its newline at the end was not seen")
	}
}
