package chunks_test

import (
	"syscall"
	"testing"
)

// allocated is how many bytes of disk a file's blocks take.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
