package templatebuild

import (
	"bytes"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/hostd/api"
)

// maxLine bounds a log event's line: a longer one is sent in pieces.
const maxLine = 16 << 10

// lineWriter turns what the engines write into log events, one per line.
type lineWriter struct {
	stream apitypes.TemplateBuildEventStream
	emit   func(api.TemplateBuildEvent)
	buf    []byte
}

func newLineWriter(stream apitypes.TemplateBuildEventStream, emit func(api.TemplateBuildEvent)) *lineWriter {
	return &lineWriter{stream: stream, emit: emit}
}

// Write sends every complete line of p (and of what came before it).
func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.send(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) >= maxLine {
		w.send(w.buf[:maxLine])
		w.buf = w.buf[maxLine:]
	}
	return len(p), nil
}

// Flush sends a last line without its newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.send(w.buf)
		w.buf = nil
	}
}

func (w *lineWriter) send(b []byte) {
	line, stream := string(bytes.TrimSuffix(b, []byte("\r"))), w.stream
	w.emit(api.TemplateBuildEvent{Type: apitypes.TemplateBuildEventTypeLog, Line: &line, Stream: &stream})
}
