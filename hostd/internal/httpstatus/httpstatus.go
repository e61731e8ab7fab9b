// Package httpstatus records the status of HTTP responses for hostd's
// request logs and traces (the API and the port proxy).
package httpstatus

import "net/http"

// Recorder remembers the status written through it. Unwrap lets
// http.ResponseController (Flush, deadlines) and the reverse proxy
// (Hijack, for WebSocket upgrades) reach the connection.
type Recorder struct {
	http.ResponseWriter
	code int
}

// WriteHeader records the first status written.
func (s *Recorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write records 200 if no status was written first.
func (s *Recorder) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Unwrap returns the underlying writer.
func (s *Recorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Status is the response's status (200 when nothing was written).
func (s *Recorder) Status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}
