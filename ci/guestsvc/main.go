// Command guestsvc is a small HTTP service that the service-URL tests and
// benchmarks run inside a sandbox: a WebSocket echo, a header mirror, a
// sized response and a response that streams on a signal. It is built
// statically on the host and copied into the guest.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	get := flag.String("get", "", "instead of serving, GET this URL -n times with keep-alive and print each duration in ns")
	n := flag.Int("n", 100, "requests for -get")
	flag.Parse()
	if *get != "" {
		if err := timeGets(*get, *n); err != nil {
			fmt.Fprintln(os.Stderr, "guestsvc:", err)
			os.Exit(1)
		}
		return
	}
	if err := http.ListenAndServe(*addr, newMux()); err != nil {
		fmt.Fprintln(os.Stderr, "guestsvc:", err)
		os.Exit(1)
	}
}

func newMux() *http.ServeMux {
	var (
		mu      sync.Mutex
		release = make(chan struct{})
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong\n") })
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"url": r.URL.String(), "host": r.Host, "proto": r.Proto, "headers": r.Header})
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "bad n", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 256<<10)
		for n > 0 {
			k := min(n, int64(len(buf)))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	// /stream sends a first line at once and a second one after /release.
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ch := release
		mu.Unlock()
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		select {
		case <-ch:
		case <-time.After(2 * time.Minute):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second\n")
	})
	mux.HandleFunc("/release", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		close(release)
		release = make(chan struct{})
		mu.Unlock()
		io.WriteString(w, "released\n")
	})
	mux.HandleFunc("/ws", echo)
	return mux
}

// timeGets is the in-guest baseline of the service-URL benchmark: the
// same keep-alive GETs, made from inside the sandbox.
func timeGets(url string, n int) error {
	c := &http.Client{}
	for i := 0; i <= n; i++ { // the first one opens the connection
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Println(time.Since(start).Nanoseconds())
		}
	}
	return nil
}

// echo sends every WebSocket message back.
func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		log.Print(err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(8 << 20)
	ctx := context.Background()
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		if err := c.Write(ctx, typ, data); err != nil {
			return
		}
	}
}
