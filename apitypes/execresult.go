package apitypes

// StdoutBytes returns a collected exec's exact stdout: StdoutB64 when the
// output was not valid UTF-8, else Stdout's bytes.
func (r ExecResult) StdoutBytes() []byte { return outputBytes(r.Stdout, r.StdoutB64) }

// StderrBytes returns a collected exec's exact stderr, as StdoutBytes does.
func (r ExecResult) StderrBytes() []byte { return outputBytes(r.Stderr, r.StderrB64) }

func outputBytes(text string, b []byte) []byte {
	if b != nil {
		return b
	}
	return []byte(text)
}
