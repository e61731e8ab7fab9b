package mounts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync/atomic"
	"syscall"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Bounds on what one guest call may ask.
const (
	// MaxIO is the most bytes one Read or Write moves; the guest's FUSE
	// filesystem uses the same size, and bigger files move in chunks.
	MaxIO = 1 << 20
	// maxDirPage is the most entries one ReadDir returns, and maxDirBytes
	// the most bytes they take (well within ttrpc's 4 MiB message).
	maxDirPage  = 16384
	maxDirBytes = 2 << 20
	maxPath     = 4096
	// concurrency is how many calls of one sandbox run at once; the rest
	// wait, so a guest that floods its mounts slows only itself.
	concurrency = 4
)

// Set is the opened mounts of one sandbox. It outlives the sandbox's VMs
// (and so its channel connections): serve it on each new stream.
type Set struct {
	specs    []Spec
	backends map[string]backend
}

// Open opens the sources of specs (already validated) that need no
// configuration (host directories).
func Open(specs []Spec) (*Set, error) { return Config{}.Open(context.Background(), specs) }

// Open opens the sources of specs (already validated). Close the Set when the
// sandbox ends.
func (c Config) Open(ctx context.Context, specs []Spec) (*Set, error) {
	s := &Set{specs: specs, backends: map[string]backend{}}
	for i, sp := range specs {
		var b backend
		var err error
		switch sp.Type {
		case TypeHost, TypeGit:
			b, err = openHostDir(sp.Source, sp.AllowSymlinks || sp.Type == TypeGit, sp.Type == TypeGit)
		case TypeS3:
			b, err = c.openS3(ctx, sp, false)
		default:
			err = fmt.Errorf("%w: unknown type %q", ErrInvalid, sp.Type)
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("mounts[%d] (%s): %w", i, sp.Path, err)
		}
		s.backends[mountID(i)] = b
	}
	return s, nil
}

// Specs returns the mounts of s.
func (s *Set) Specs() []Spec { return s.specs }

// Close closes every source.
func (s *Set) Close() error {
	var errs []error
	for _, b := range s.backends {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}

func mountID(i int) string { return fmt.Sprintf("m%d", i) }

// service serves one connection's calls over a Set.
type service struct {
	set   *Set
	sem   chan struct{}
	ready func(errs map[string]string)
	// inFlight is how many calls run now (Stats).
	inFlight atomic.Int64
}

var _ agentv1.MountsService = (*service)(nil)

// op checks a call's mount and path and runs fn with a slot of the
// connection's concurrency. Failures become errnos, never call errors.
func (s *service) op(ctx context.Context, method, mount, p string, write bool, fn func(b backend, p string) error) int32 {
	countCall(method)
	b, ok := s.set.backends[mount]
	if !ok {
		return int32(syscall.ENODEV)
	}
	p, err := cleanPath(p)
	if err != nil {
		return int32(syscall.EINVAL)
	}
	if write && s.readOnly(mount) {
		return int32(syscall.EROFS)
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return int32(syscall.EINTR)
	}
	noteInFlight(s.inFlight.Add(1))
	defer func() {
		s.inFlight.Add(-1)
		<-s.sem
	}()
	return errnoOf(fn(b, p))
}

func (s *service) readOnly(mount string) bool {
	for i, sp := range s.set.specs {
		if mountID(i) == mount {
			return sp.ReadOnly
		}
	}
	return true
}

// cleanPath turns a guest's mount-relative path into os.Root's form.
func cleanPath(p string) (string, error) {
	switch {
	case p == "":
		return ".", nil
	case len(p) > maxPath, strings.HasPrefix(p, "/"), path.Clean(p) != p, hasDotDot(p), strings.ContainsRune(p, 0):
		return "", errors.New("bad path")
	}
	return p, nil
}

// errnoOf maps a host error to the errno the guest sees.
func errnoOf(err error) int32 {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &en):
		return int32(en)
	case errors.Is(err, fs.ErrNotExist):
		return int32(syscall.ENOENT)
	case errors.Is(err, fs.ErrExist):
		return int32(syscall.EEXIST)
	case errors.Is(err, fs.ErrPermission):
		return int32(syscall.EACCES)
	case strings.Contains(err.Error(), "escapes"): // os.Root refused a path out of the mount
		return int32(syscall.EACCES)
	}
	return int32(syscall.EIO)
}

func (s *service) Hello(ctx context.Context, _ *agentv1.MountHelloRequest) (*agentv1.MountHelloResponse, error) {
	out := &agentv1.MountHelloResponse{}
	for i, sp := range s.set.specs {
		out.Mounts = append(out.Mounts, &agentv1.MountSpec{Id: mountID(i), Path: sp.Path, ReadOnly: sp.ReadOnly})
	}
	return out, nil
}

func (s *service) Ready(ctx context.Context, req *agentv1.MountReadyRequest) (*agentv1.MountResult, error) {
	if s.ready != nil {
		s.ready(req.Errors)
	}
	return &agentv1.MountResult{}, nil
}

func (s *service) Lstat(ctx context.Context, req *agentv1.MountPathRequest) (*agentv1.MountAttrResponse, error) {
	out := &agentv1.MountAttrResponse{}
	out.Errno = s.op(ctx, "Lstat", req.Mount, req.Path, false, func(b backend, p string) (err error) {
		out.Attr, err = b.Lstat(p)
		return err
	})
	return out, nil
}

func (s *service) ReadDir(ctx context.Context, req *agentv1.MountReadDirRequest) (*agentv1.MountReadDirResponse, error) {
	out := &agentv1.MountReadDirResponse{}
	out.Errno = s.op(ctx, "ReadDir", req.Mount, req.Path, false, func(b backend, p string) (err error) {
		if req.Offset > 1<<31 {
			return syscall.EINVAL
		}
		out.Entries, out.Eof, err = b.ReadDir(p, int(req.Offset), maxDirPage, req.Plus)
		size := 0
		for i, e := range out.Entries {
			if size += proto.Size(e) + 8; size > maxDirBytes {
				out.Entries, out.Eof = out.Entries[:i], false
				break
			}
		}
		stats.dirEntries.Add(uint64(len(out.Entries)))
		return err
	})
	return out, nil
}

func (s *service) Read(ctx context.Context, req *agentv1.MountReadRequest) (*agentv1.MountReadResponse, error) {
	out := &agentv1.MountReadResponse{}
	out.Errno = s.op(ctx, "Read", req.Mount, req.Path, false, func(b backend, p string) error {
		if req.Size > MaxIO || req.Offset < 0 {
			return syscall.EINVAL
		}
		buf := make([]byte, req.Size)
		n, err := b.ReadAt(p, buf, req.Offset)
		out.Data = buf[:n]
		stats.readBytes.Add(uint64(n))
		return err
	})
	return out, nil
}

func (s *service) Write(ctx context.Context, req *agentv1.MountWriteRequest) (*agentv1.MountWriteResponse, error) {
	out := &agentv1.MountWriteResponse{}
	out.Errno = s.op(ctx, "Write", req.Mount, req.Path, true, func(b backend, p string) error {
		if len(req.Data) > MaxIO || req.Offset < 0 {
			return syscall.EINVAL
		}
		n, err := b.WriteAt(p, req.Data, req.Offset)
		out.Written = uint32(n)
		stats.writeBytes.Add(uint64(n))
		return err
	})
	return out, nil
}

// created answers a call that made p with p's attributes.
func created(ctx context.Context, s *service, method, mount, p string, make func(b backend, p string) error) *agentv1.MountAttrResponse {
	out := &agentv1.MountAttrResponse{}
	out.Errno = s.op(ctx, method, mount, p, true, func(b backend, p string) (err error) {
		if err := make(b, p); err != nil {
			return err
		}
		out.Attr, err = b.Lstat(p)
		return err
	})
	return out
}

func (s *service) Create(ctx context.Context, req *agentv1.MountCreateRequest) (*agentv1.MountAttrResponse, error) {
	return created(ctx, s, "Create", req.Mount, req.Path, func(b backend, p string) error {
		return b.Create(p, fs.FileMode(req.Mode&0o777), req.Exclusive)
	}), nil
}

func (s *service) Mkdir(ctx context.Context, req *agentv1.MountCreateRequest) (*agentv1.MountAttrResponse, error) {
	return created(ctx, s, "Mkdir", req.Mount, req.Path, func(b backend, p string) error {
		return b.Mkdir(p, fs.FileMode(req.Mode&0o777))
	}), nil
}

func (s *service) Symlink(ctx context.Context, req *agentv1.MountSymlinkRequest) (*agentv1.MountAttrResponse, error) {
	return created(ctx, s, "Symlink", req.Mount, req.Path, func(b backend, p string) error {
		if len(req.Target) > maxPath {
			return syscall.ENAMETOOLONG
		}
		return b.Symlink(req.Target, p)
	}), nil
}

func (s *service) Readlink(ctx context.Context, req *agentv1.MountPathRequest) (*agentv1.MountReadlinkResponse, error) {
	out := &agentv1.MountReadlinkResponse{}
	out.Errno = s.op(ctx, "Readlink", req.Mount, req.Path, false, func(b backend, p string) (err error) {
		out.Target, err = b.Readlink(p)
		return err
	})
	return out, nil
}

func (s *service) Remove(ctx context.Context, req *agentv1.MountRemoveRequest) (*agentv1.MountResult, error) {
	errno := s.op(ctx, "Remove", req.Mount, req.Path, true, func(b backend, p string) error {
		if p == "." {
			return syscall.EBUSY
		}
		return b.Remove(p, req.Dir)
	})
	return &agentv1.MountResult{Errno: errno}, nil
}

func (s *service) Rename(ctx context.Context, req *agentv1.MountRenameRequest) (*agentv1.MountResult, error) {
	errno := s.op(ctx, "Rename", req.Mount, req.From, true, func(b backend, from string) error {
		to, err := cleanPath(req.To)
		if err != nil || from == "." || to == "." {
			return syscall.EINVAL
		}
		return b.Rename(from, to)
	})
	return &agentv1.MountResult{Errno: errno}, nil
}

func (s *service) SetAttr(ctx context.Context, req *agentv1.MountSetAttrRequest) (*agentv1.MountAttrResponse, error) {
	out := &agentv1.MountAttrResponse{}
	out.Errno = s.op(ctx, "SetAttr", req.Mount, req.Path, true, func(b backend, p string) (err error) {
		if err := b.SetAttr(p, req); err != nil {
			return err
		}
		out.Attr, err = b.Lstat(p)
		return err
	})
	return out, nil
}

// Flush asks the backend to make the guest's writes to a file durable (an
// S3 bucket uploads the file's buffered copy); read-only mounts and host
// directories have nothing to do.
func (s *service) Flush(ctx context.Context, req *agentv1.MountPathRequest) (*agentv1.MountResult, error) {
	if s.readOnly(req.Mount) {
		return &agentv1.MountResult{}, nil
	}
	errno := s.op(ctx, "Flush", req.Mount, req.Path, true, func(b backend, p string) error { return b.Flush(p) })
	return &agentv1.MountResult{Errno: errno}, nil
}
