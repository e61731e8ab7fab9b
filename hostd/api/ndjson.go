package api

import (
	"net/http"
	"time"
)

// startNDJSON answers 200 with a JSON Lines stream: the content type, no
// sniffing, and no write deadline (a followed stream may last hours).
// Call it once, before the first line.
func startNDJSON(w http.ResponseWriter, rc *http.ResponseController) {
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
}
