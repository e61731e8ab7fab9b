package agent

import (
	"encoding/binary"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RNDADDENTROPY and RNDRESEEDCRNG from <linux/random.h>.
const (
	rndAddEntropy = 0x40085203
	rndReseedCRNG = 0x5207
)

// addEntropy writes b into the kernel's input pool with RNDADDENTROPY, which
// (unlike a plain write to /dev/urandom) credits it and reseeds at once.
func addEntropy(b []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	req := make([]byte, 8+len(b))
	binary.NativeEndian.PutUint32(req[0:], uint32(len(b)*8))
	binary.NativeEndian.PutUint32(req[4:], uint32(len(b)))
	copy(req[8:], b)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&req[0])))
	if errno != 0 {
		return os.NewSyscallError("ioctl RNDADDENTROPY", errno)
	}
	// Reseed the CRNG from the pool now, so the very next read differs
	// between forks that resumed from the same memory.
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); errno != 0 {
		return os.NewSyscallError("ioctl RNDRESEEDCRNG", errno)
	}
	return nil
}
