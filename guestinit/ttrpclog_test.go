package guestinit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/containerd/log"
	"github.com/sirupsen/logrus"
)

// What ttrpc logs goes to guestinit's log at debug level, and nothing to
// stderr (the console).
func TestQuietTTRPC(t *testing.T) {
	std := logrus.StandardLogger()
	out, format, hooks := std.Out, std.Formatter, std.Hooks
	t.Cleanup(func() {
		std.SetOutput(out)
		std.SetFormatter(format)
		std.ReplaceHooks(hooks)
	})
	var stderr bytes.Buffer
	std.SetOutput(&stderr)
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		var b bytes.Buffer
		quietTTRPC(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: level})))
		// As ttrpc's server logs it (server.go).
		log.G(context.Background()).WithError(errors.New("session shutdown")).Error("failed sending message on channel")
		got := b.String()
		switch {
		case level == slog.LevelDebug && (!strings.Contains(got, "level=DEBUG") || !strings.Contains(got, `msg="ttrpc: failed sending message on channel"`) || !strings.Contains(got, `error="session shutdown"`)):
			t.Errorf("debug log: %q, want the message and its error at debug level", got)
		case level == slog.LevelInfo && got != "":
			t.Errorf("info log: %q, want nothing", got)
		}
		if std.Out != io.Discard || stderr.Len() > 0 {
			t.Errorf("logrus still writes: %q", stderr.String())
		}
	}
}
