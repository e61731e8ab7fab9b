package cloudhypervisor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// This file holds what the pinned spec leaves out, added by hand and kept
// narrow. Checked against Cloud Hypervisor's source at the spec's commit
// (v53.0-246-gae44c2971, the 54.0 development line; net_fds exists since
// v40.0):
//
//   - vm.restore accepts "net_fds": [{"id": <net id>, "num_fds": n}, ...].
//     It replaces the tap descriptors of FD-backed network devices, which a
//     snapshot cannot carry.
//   - Descriptors never travel in JSON. They arrive as SCM_RIGHTS ancillary
//     data on the socket write that carries the HTTP request: for vm.restore
//     the num_fds of each net_fds entry in order, for vm.add-net all of them.

// restoreConfig is chapi.RestoreConfig plus net_fds.
type restoreConfig struct {
	chapi.RestoreConfig
	NetFDs []restoredNet `json:"net_fds,omitempty"`
}

// restoredNet names a network device of the snapshot and how many of the
// request's descriptors belong to it.
type restoredNet struct {
	ID     string `json:"id"`
	NumFDs int    `json:"num_fds"`
}

// maxResponse bounds what we read of an answer.
const maxResponse = 1 << 20

// putWithFiles sends req on a fresh connection to the API socket with files
// attached as SCM_RIGHTS to the first write, and returns the answer with its
// body read into memory. net/http cannot attach ancillary data, so the
// request is written by hand; the answer is parsed by http.ReadResponse.
func (c *restClient) putWithFiles(ctx context.Context, req *http.Request, files []*os.File) (*http.Response, error) {
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	fds, err := rawFDs(files)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.sock)
	if err != nil {
		return nil, err
	}
	conn := nc.(*net.UnixConn)
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	err = writeWithRights(conn, raw.Bytes(), fds)
	runtime.KeepAlive(files) // the descriptors must stay open until sent
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("write request: %w", err))
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("read answer: %w", err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("read answer: %w", err))
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// writeWithRights writes b with the descriptors attached to the first byte
// written; a short sendmsg is finished with plain writes.
func writeWithRights(conn *net.UnixConn, b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := conn.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	_, err = conn.Write(b[n:])
	return err
}

// rawFDs returns the descriptor numbers of files without switching them to
// blocking mode (as File.Fd would).
func rawFDs(files []*os.File) ([]int, error) {
	fds := make([]int, 0, len(files))
	for _, f := range files {
		if f == nil {
			return nil, errors.New("nil file")
		}
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if err := rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) }); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	return fds, nil
}

// ctxErr prefers ctx's error when ctx ended. A deadline copied from ctx
// onto the connection can fire just before ctx's own timer, so a timeout
// counts as ctx's deadline too.
func ctxErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if _, ok := ctx.Deadline(); ok && cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}
