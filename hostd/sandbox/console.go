package sandbox

import (
	"errors"
	"io"
	"os"
	"time"
)

// A guest writes its console as fast as it likes (issue 16: 50 MB at
// ~290 KB/s, without end). While a sandbox runs, capConsole keeps its
// console log under consoleMax: when the log passes it, the log is copied
// to console.log.1 (replacing the previous one) and truncated, the way
// logrotate's copytruncate does; the VMM appends (O_APPEND), so its next
// write lands at the new start. Only what the guest writes between the
// copy and the truncate is lost; the two files hold about 2 x consoleMax
// (plus what one consoleCheck lets the guest add). The VMM (QEMU) opens the
// log with append=on; a VMM that writes at its own offset would leave a
// sparse file whose data still stays bounded.
const (
	consoleMax   = 4 << 20
	consoleCheck = 2 * time.Second
)

// capConsole rotates the console log at path until b goes.
func (b *runningVM) capConsole(path string) {
	b.every(consoleCheck, func() {
		if _, err := rotateConsole(path, consoleMax); err != nil {
			b.log.Warn("console log rotation", "sandbox_id", b.id, "err", err)
		}
	})
}

// rotateConsole moves the log at path to path.1 by copy and truncate once
// it is larger than max, and reports whether it did.
func rotateConsole(path string, max int64) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil || fi.Size() <= max {
		return false, err
	}
	src, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer src.Close()
	tmp := path + ".1.tmp"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(dst, io.LimitReader(src, fi.Size()))
	err = errors.Join(err, dst.Close())
	if err == nil {
		err = os.Rename(tmp, path+".1")
	}
	if err != nil {
		os.Remove(tmp)
		return false, err
	}
	return true, os.Truncate(path, 0)
}
