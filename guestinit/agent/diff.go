package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Bounds of the Diff service: what one call may ask and answer, and how
// long it works before it answers what it has (the host asks again from
// there). A page always carries at least one entry or one step of a walk,
// so a walk moves on however slow the guest.
const (
	diffMaxStatPaths = 1000
	diffMaxLimit     = 10000
	diffReplyBytes   = 1 << 20
	diffBudget       = 10 * time.Second
	// diffMaxDigest caps max_digest_bytes: hashing a file is one step,
	// which the time budget cannot cut.
	diffMaxDigest = 1 << 30
)

// Diff serves the Diff service: stats with digests and sorted walks of the
// guest's tree for a sandbox diff. It keeps no state between calls.
type Diff struct {
	now func() time.Time
}

// NewDiff returns the Diff service.
func NewDiff() *Diff { return &Diff{now: time.Now} }

// Stat describes the paths asked, in their order, until the page's bytes
// or time run out.
func (d *Diff) Stat(ctx context.Context, req *agentv1.DiffStatRequest) (*agentv1.DiffStatResponse, error) {
	if len(req.Paths) > diffMaxStatPaths {
		return nil, toStatus(fmt.Errorf("%w: %d paths, at most %d", errBadArgs, len(req.Paths), diffMaxStatPaths))
	}
	paths := make([]string, len(req.Paths))
	for i, b := range req.Paths {
		p, err := cleanPath(b)
		if err != nil {
			return nil, toStatus(err)
		}
		paths[i] = p
	}
	start, size := d.now(), 0
	resp := &agentv1.DiffStatResponse{}
	for i, p := range paths {
		if i > 0 && (size >= diffReplyBytes || d.now().Sub(start) >= diffBudget) {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, toStatus(err)
		}
		var st unix.Stat_t
		e := &agentv1.DiffEntry{Path: []byte(p)}
		if unix.Lstat(p, &st) == nil {
			e = diffEntry(p, &st, req.MaxDigestBytes)
		}
		size += proto.Size(e) + 8
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// diffEntry describes p from its lstat, with a regular file's digest when
// it is at most maxDigest bytes.
func diffEntry(p string, st *unix.Stat_t, maxDigest uint64) *agentv1.DiffEntry {
	e := &agentv1.DiffEntry{Path: []byte(p), Mode: st.Mode & 0o7777, Uid: st.Uid, Gid: st.Gid, Size: st.Size,
		MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = agentv1.DiffType_DIFF_FILE
		if maxDigest > diffMaxDigest {
			maxDigest = diffMaxDigest
		}
		if uint64(st.Size) > maxDigest {
			e.DigestError = "too_large"
			break
		}
		sum, err := digest(p, int64(maxDigest))
		if err != nil {
			e.DigestError = err.Error()
			break
		}
		e.Sha256 = sum
	case unix.S_IFDIR:
		e.Type, e.Size = agentv1.DiffType_DIFF_DIR, 0
	case unix.S_IFLNK:
		e.Type = agentv1.DiffType_DIFF_SYMLINK
		if t, err := os.Readlink(p); err == nil && len(t) <= maxLinkTarget {
			e.Link = []byte(t)
		}
	default:
		e.Type = agentv1.DiffType_DIFF_OTHER
	}
	return e
}

var errGrew = errors.New("too_large")

// digest is the sha256 of regular file p, read to at most limit bytes (a
// file that grows past it has none). It neither follows a symlink nor
// blocks on a FIFO swapped in since the lstat.
func digest(p string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, bare(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not_regular")
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, limit+1))
	if err != nil {
		return nil, bare(err)
	}
	if n > limit {
		return nil, errGrew
	}
	return h.Sum(nil), nil
}

// bare is err without its path (the entry names it): the errno's words.
func bare(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
