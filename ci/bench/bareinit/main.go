// Command bareinit is the trivial static PID 1 of the bench's floors: the
// least a guest needs to answer on the agent channel (no agent, network,
// root filesystem or cgroups). It loads the virtio console modules, says
// BARE-READY on the console, and serves the virtio-serial port:
//
//	'p'          → 'k'                          (ping)
//	'w' len(8)   → reads len bytes, then 'k'    (host → guest stream)
//	'r' len(8)   → writes len bytes             (guest → host stream)
//
// ci/bench packs it with images/mkinitramfs.sh. It is a bench tool, not part
// of the product.
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	_ = unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	_ = unix.Mount("sysfs", "/sys", "sysfs", 0, "")
	for _, m := range []string{"virtio_ring", "virtio", "virtio_mmio", "virtio_console"} {
		if f, err := os.Open("/lib/modules/" + m + ".ko"); err == nil {
			_ = unix.FinitModule(int(f.Fd()), "", 0)
			f.Close()
		}
	}
	console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		console = os.Stdout
	}
	var port *os.File
	for port == nil {
		if ms, _ := filepath.Glob("/dev/vport*p1"); len(ms) > 0 {
			port, _ = os.OpenFile(ms[0], os.O_RDWR, 0)
		}
		if port == nil {
			time.Sleep(time.Millisecond)
		}
	}
	fmt.Fprintln(console, "BARE-READY")
	serve(port)
}

func serve(port *os.File) {
	buf := make([]byte, 1<<16)
	var hdr [8]byte
	for {
		n, err := port.Read(buf[:1])
		if n == 0 || err != nil {
			time.Sleep(time.Millisecond) // no host connected: reads end at once
			continue
		}
		switch buf[0] {
		case 'p':
			_, _ = port.Write([]byte{'k'})
		case 'w':
			if _, err := io.ReadFull(port, hdr[:]); err == nil {
				if _, err := io.CopyBuffer(io.Discard, io.LimitReader(port, int64(binary.LittleEndian.Uint64(hdr[:]))), buf); err == nil {
					_, _ = port.Write([]byte{'k'})
				}
			}
		case 'r':
			if _, err := io.ReadFull(port, hdr[:]); err == nil {
				for left := int64(binary.LittleEndian.Uint64(hdr[:])); left > 0; {
					n, err := port.Write(buf[:min(left, int64(len(buf)))])
					if err != nil {
						break
					}
					left -= int64(n)
				}
			}
		}
	}
}
