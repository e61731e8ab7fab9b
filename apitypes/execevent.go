package apitypes

// End returns the offset just after an output event's data: where to
// re-attach to read on.
func (e ExecEvent) End() int64 { return e.Offset + int64(len(e.Data)) }

// ExitStatus returns an exit event's exit code (-1 when killed by a
// signal) and the name of the signal that killed the command, if any.
func (e ExecEvent) ExitStatus() (code int, signal string) {
	if e.ExitCode != nil {
		code = *e.ExitCode
	}
	if e.Signal != nil {
		signal = *e.Signal
	}
	return code, signal
}
