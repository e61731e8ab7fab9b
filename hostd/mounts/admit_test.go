package mounts

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"

	"github.com/agentbox/agentbox/internal/waitfor"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// frame is one ttrpc frame as a guest would write it.
func frame(t *testing.T, id uint32, typ byte, payload []byte) []byte {
	t.Helper()
	b := make([]byte, frameHeader, frameHeader+len(payload))
	binary.BigEndian.PutUint32(b[:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(b[4:8], id)
	b[8] = typ
	return append(b, payload...)
}

func lstatRequest(t *testing.T) []byte {
	t.Helper()
	p, err := proto.Marshal(&agentv1.MountPathRequest{Mount: "m0", Path: ""})
	if err != nil {
		t.Fatal(err)
	}
	req, err := proto.Marshal(&ttrpc.Request{Service: "agentbox.agent.v1.Mounts", Method: "Lstat", Payload: p})
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// A guest that floods the mount server with requests and reads none of the
// answers holds at most maxPending of them in hostd: the goroutines stay
// bounded, and the server ends, with them all, when the stream closes.
func TestMountFloodBounded(t *testing.T) {
	set, err := Open([]Spec{{Type: TypeHost, Source: t.TempDir(), Path: "/mnt/h"}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	before := runtime.NumGoroutine()
	host, guest := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- set.Serve(context.Background(), host, nil) }()

	const flood = 5000
	req := lstatRequest(t)
	var sent atomic.Int64
	go func() {
		for i := range flood {
			if _, err := guest.Write(frame(t, uint32(2*i+1), 1, req)); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	// Give the flood time to get as far as hostd lets it (a bounded wait
	// for a bad outcome, not a synchronisation: nothing signals "hostd
	// will read no more"; nothing asserts how long anything takes).
	for i := 0; i < 50 && sent.Load() < flood; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if n := sent.Load(); n > maxPending+1 {
		t.Errorf("hostd read %d requests with none answered, want at most %d", n, maxPending+1)
	}
	if g := runtime.NumGoroutine() - before; g > maxPending+8 {
		t.Errorf("%d more goroutines during the flood", g)
	}
	// Reading the answers lets the rest in; garbage then ends nothing badly.
	go io.Copy(io.Discard, guest)
	junk := make([]byte, 1<<16)
	rand.Read(junk)
	waitfor.Cond(t, "the rest of the flood", func() bool { return sent.Load() == flood })
	guest.Write(junk)
	guest.Close()
	<-done
	for i := 0; i < 100 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("goroutines %d after the stream closed, %d before", g, before)
	}
}
