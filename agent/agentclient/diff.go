package agentclient

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Bounds of the Diff calls.
const (
	// MaxDiffStatPaths is how many paths one Stat call asks for.
	MaxDiffStatPaths = 1000
	// MaxDiffLimit bounds the entries of one DiffWalk.
	MaxDiffLimit = 10000
	// maxStatBytes bounds the paths of one Stat call, far under ttrpc's
	// 4 MiB message.
	maxStatBytes = 1 << 20
	// maxDigestError bounds an entry's digest_error.
	maxDigestError = 512
)

// ErrNoDiff: the agent predates the Diff service.
var ErrNoDiff = errors.New("agentclient: the agent has no Diff service")

// diffErr is fromStatus, with an agent that lacks the service as ErrNoDiff.
func diffErr(err error) error {
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("%w: %v", ErrNoDiff, err)
	}
	return diffErr(err)
}

// Entry types of a DiffEntry ("" for a missing path).
const (
	DiffFile    = "file"
	DiffDir     = "dir"
	DiffSymlink = "symlink"
	DiffOther   = "other"
)

var diffTypes = map[agentv1.DiffType]string{agentv1.DiffType_DIFF_MISSING: "", agentv1.DiffType_DIFF_FILE: DiffFile,
	agentv1.DiffType_DIFF_DIR: DiffDir, agentv1.DiffType_DIFF_SYMLINK: DiffSymlink, agentv1.DiffType_DIFF_OTHER: DiffOther}

// DiffEntry is a guest entry as the Diff service describes it, checked.
// Path and Link are the guest's bytes.
type DiffEntry struct {
	Path string
	// Type is DiffFile, DiffDir, DiffSymlink or DiffOther; "" when the
	// path is missing.
	Type         string
	Mode         uint32 // permission bits with setuid, setgid, sticky
	UID, GID     uint32
	Size         int64
	MTime, CTime time.Time
	Link         string
	// SHA256 is a file's hex digest; "" with DigestError saying why not.
	SHA256      string
	DigestError string
}

func diffEntryOf(e *agentv1.DiffEntry) (DiffEntry, error) {
	t, ok := diffTypes[e.Type]
	switch {
	case !ok:
		return DiffEntry{}, badReply("diff entry of type %d", e.Type)
	case len(e.Path) > MaxPath || len(e.Link) > MaxPath || len(e.DigestError) > maxDigestError:
		return DiffEntry{}, badReply("diff entry of %d bytes of path, %d of target", len(e.Path), len(e.Link))
	case len(e.Sha256) != 0 && len(e.Sha256) != 32:
		return DiffEntry{}, badReply("sha256 of %d bytes", len(e.Sha256))
	case e.Size < 0 || e.Mode > 0o7777:
		return DiffEntry{}, badReply("diff entry of size %d, mode %o", e.Size, e.Mode)
	}
	d := DiffEntry{Path: string(e.Path), Type: t, Mode: e.Mode, UID: e.Uid, GID: e.Gid, Size: e.Size,
		MTime: time.Unix(0, e.MtimeNs).UTC(), CTime: time.Unix(0, e.CtimeNs).UTC(), Link: string(e.Link),
		DigestError: strings.ToValidUTF8(e.DigestError, "?")}
	if len(e.Sha256) == 32 {
		d.SHA256 = hex.EncodeToString(e.Sha256)
	}
	if t == "" {
		d = DiffEntry{Path: d.Path}
	}
	return d, nil
}

// DiffStat describes each of paths (lstat), in their order, with a
// regular file's sha256 when it has at most maxDigest bytes. It asks the
// guest in pages of MaxDiffStatPaths (and 1 MiB of paths) and asks again
// for what a page left.
func (c *Client) DiffStat(ctx context.Context, paths []string, maxDigest int64, emit func(DiffEntry) error) error {
	for len(paths) > 0 {
		n, size := 0, 0
		for n < len(paths) && n < MaxDiffStatPaths && (n == 0 || size+len(paths[n]) <= maxStatBytes) {
			size += len(paths[n])
			n++
		}
		req := &agentv1.DiffStatRequest{Paths: make([][]byte, n), MaxDigestBytes: uint64(max(maxDigest, 0))}
		for i, p := range paths[:n] {
			req.Paths[i] = []byte(p)
		}
		r, err := c.diff.Stat(ctx, req)
		if err != nil {
			return diffErr(err)
		}
		if len(r.Entries) == 0 || len(r.Entries) > n {
			return badReply("diff stat answered %d of %d paths", len(r.Entries), n)
		}
		for i, pe := range r.Entries {
			e, err := diffEntryOf(pe)
			if err != nil {
				return err
			}
			if e.Path != paths[i] {
				return badReply("diff stat answered %q for %q", e.Path, paths[i])
			}
			if err := emit(e); err != nil {
				return err
			}
		}
		paths = paths[len(r.Entries):]
	}
	return nil
}

// DiffWalkRequest is a walk of a guest's tree (agentv1.DiffWalkRequest).
type DiffWalkRequest struct {
	Root     string
	Excludes []string
	// Since lists only what changed after it (zero: every entry), and
	// every child of a changed directory or of one of Lists.
	Since    time.Time
	After    string
	Limit    int
	Lists    []string
	DirsOnly bool
	// MaxDigest bounds the files that get a digest.
	MaxDigest int64
}

// DiffWalk calls emit with up to req.Limit entries under req.Root after
// req.After, in path byte order, asking the guest page after page; more
// reports that the tree goes on after next, where the walk stopped (every
// path up to next was walked).
func (c *Client) DiffWalk(ctx context.Context, req DiffWalkRequest, emit func(DiffEntry) error) (more bool, next string, err error) {
	if req.Limit < 1 || req.Limit > MaxDiffLimit {
		return false, "", fmt.Errorf("%w: diff walk of %d entries (1 to %d)", ErrInvalid, req.Limit, MaxDiffLimit)
	}
	q := &agentv1.DiffWalkRequest{Root: []byte(req.Root), DirsOnly: req.DirsOnly, MaxDigestBytes: uint64(max(req.MaxDigest, 0))}
	if !req.Since.IsZero() {
		q.SinceNs = req.Since.UnixNano()
	}
	for _, e := range req.Excludes {
		q.Excludes = append(q.Excludes, []byte(e))
	}
	for _, l := range req.Lists {
		q.Lists = append(q.Lists, []byte(l))
	}
	after, left := req.After, req.Limit
	for {
		q.After, q.Limit = []byte(after), uint32(left)
		r, err := c.diff.Walk(ctx, q)
		if err != nil {
			return false, "", diffErr(err)
		}
		if len(r.Entries) > left {
			return false, "", badReply("diff walk answered %d entries, asked for %d", len(r.Entries), left)
		}
		for _, pe := range r.Entries {
			e, err := diffEntryOf(pe)
			if err != nil {
				return false, "", err
			}
			if e.Path <= after || !under(e.Path, req.Root) || e.Type == "" || (req.DirsOnly && e.Type != DiffDir) {
				return false, "", badReply("diff walk answered %q (a %q) after %q under %q", e.Path, e.Type, after, req.Root)
			}
			if err := emit(e); err != nil {
				return false, "", err
			}
			after, left = e.Path, left-1
		}
		if !r.More {
			return false, "", nil
		}
		if n := string(r.Next); n <= string(q.After) || n < after || len(n) > MaxPath+1 { // a page moves on
			return false, "", badReply("diff walk stopped at %q, after %q", n, after)
		}
		after = string(r.Next)
		if left == 0 {
			return true, after, nil
		}
	}
}

// under reports whether p is root or beneath it.
func under(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}
