// Command chanthief is a hostile guest program for hostd's VM tests: as
// root in the guest, it takes a copy of guestinit's agent-channel fd (the
// virtio-serial port; pidfd_getfd), writes garbage and forged yamux frames
// to the host, reads (steals) what the host sends for a while, as a guest
// that replaced its agent would, and last starts a frame it never ends. It
// exits when done.
package main

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chanthief:", err)
		os.Exit(1)
	}
}

func run() error {
	target := -1
	ents, err := os.ReadDir("/proc/1/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		link, _ := os.Readlink("/proc/1/fd/" + e.Name())
		if strings.HasPrefix(link, "/dev/vport") {
			target, _ = strconv.Atoi(e.Name())
			break
		}
	}
	if target < 0 {
		return fmt.Errorf("no virtio-serial fd in PID 1")
	}
	pidfd, err := unix.PidfdOpen(1, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	fd, err := unix.PidfdGetfd(pidfd, target, 0)
	if err != nil {
		return fmt.Errorf("pidfd_getfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "agent-channel")
	fmt.Println("stole fd", target)
	done := make(chan struct{})
	go func() { // steal what the host sends
		buf := make([]byte, 64<<10)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := f.Read(buf); err != nil {
				break
			}
		}
		close(done)
	}()
	junk := make([]byte, 1<<20)
	rand.Read(junk)
	if _, err := f.Write(junk); err != nil {
		return err
	}
	// Forged yamux frames: data far over any window, a huge window
	// update, a ping flood, a go-away, each for streams the host opened.
	var frames []byte
	hdr := func(typ byte, flags uint16, stream, length uint32) {
		var h [12]byte
		h[1] = typ
		binary.BigEndian.PutUint16(h[2:4], flags)
		binary.BigEndian.PutUint32(h[4:8], stream)
		binary.BigEndian.PutUint32(h[8:12], length)
		frames = append(frames, h[:]...)
	}
	for s := uint32(1); s < 64; s += 2 {
		hdr(0, 0, s, 0xfffffff0)
		hdr(1, 0, s, 0x7fffffff)
	}
	for range 10000 {
		hdr(2, 1, 0, 1)
	}
	hdr(3, 0, 0, 0)
	if _, err := f.Write(frames); err != nil {
		return err
	}
	<-done
	// Last, a data frame for the host's first stream (the agent's) that
	// never ends: yamux's reader would wait for its body for good.
	frames = frames[:0]
	hdr(0, 0, 1, 16)
	if _, err := f.Write(append(frames, 'x', 'y')); err != nil {
		return err
	}
	fmt.Println("done")
	return nil
}
