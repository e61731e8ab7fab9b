package httpstatus

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRecorder(t *testing.T) {
	tests := []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
	}{
		{"nothing", func(http.ResponseWriter) {}, http.StatusOK},
		{"body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, http.StatusOK},
		{"first header wins", func(w http.ResponseWriter) { w.WriteHeader(404); w.WriteHeader(500) }, http.StatusNotFound},
		{"header after body", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")); w.WriteHeader(500) }, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &Recorder{ResponseWriter: httptest.NewRecorder()}
			tc.write(rec)
			if got := rec.Status(); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}
