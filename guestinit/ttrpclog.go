package guestinit

import (
	"io"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// quietTTRPC sends what ttrpc logs (through containerd/log, logrus's
// standard logger, which writes colored text to stderr: the serial console)
// to log at debug level instead.
//
// In the guest ttrpc logs one thing: an answer it could not send because the
// host's session had ended ("failed sending message on channel"). That is
// expected in every restored guest: the snapshot's host is gone, and a long
// poll of its (Events.Next) is often still waiting in the guest. On the
// console each byte is an exit to the VMM, and under TCG that line was ~500
// translated blocks of a fork's wake, in about one fork of four.
func quietTTRPC(log *slog.Logger) {
	std := logrus.StandardLogger()
	std.SetOutput(io.Discard)
	std.SetFormatter(noFormat{})
	std.ReplaceHooks(logrus.LevelHooks{})
	std.AddHook(slogHook{log})
}

// slogHook passes logrus entries to a slog logger at debug level.
type slogHook struct{ log *slog.Logger }

func (slogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h slogHook) Fire(e *logrus.Entry) error {
	args := make([]any, 0, 2*len(e.Data))
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	h.log.Debug("ttrpc: "+e.Message, args...)
	return nil
}

// noFormat formats nothing: the output is discarded, and the hook has the
// entry.
type noFormat struct{}

func (noFormat) Format(*logrus.Entry) ([]byte, error) { return nil, nil }
