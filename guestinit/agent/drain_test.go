package agent

import (
	"os"
	"testing"
	"time"
)

// Output left in a pipe when the process exits is waited for, not dropped
// (on a loaded machine the pumps may not have run within drainAfterExit);
// an empty pipe held open by a child ends the wait.
func TestAwaitDrainedKeepsBufferedOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := &pipeSet{stdout: r}
	if _, err := w.WriteString("ok\n"); err != nil {
		t.Fatal(err)
	}
	if !p.buffered() {
		t.Fatal("a pipe holding output reports nothing buffered")
	}
	drained := make(chan struct{})
	got := make(chan string, 1)
	go func() {
		// The pump starts late, after the first drain interval: the
		// lateness is the case under test, no synchronisation.
		time.Sleep(2 * drainAfterExit)
		buf := make([]byte, 16)
		n, _ := r.Read(buf)
		got <- string(buf[:n])
		close(drained)
	}()
	p.awaitDrained(drained)
	if s := <-got; s != "ok\n" {
		t.Fatalf("the late pump read %q", s)
	}
	// Nothing buffered, a writer still open: the wait ends.
	r2, w2, _ := os.Pipe()
	defer w2.Close()
	p2 := &pipeSet{stdout: r2}
	done := make(chan struct{})
	go func() { buf := make([]byte, 1); r2.Read(buf); close(done) }()
	p2.awaitDrained(done)
}
