package mounts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Bounds of an S3 mount.
const (
	// s3CallTimeout bounds one request to the bucket (but an upload).
	s3CallTimeout = time.Minute
	// s3UploadTimeout bounds one upload of a written file.
	s3UploadTimeout = 30 * time.Minute
	// maxS3Pending is how many files one mount may have written and not yet
	// uploaded; more answer ENFILE.
	maxS3Pending = 64
	// maxS3Readers is how many streamed reads one mount keeps open.
	maxS3Readers = 8
	// s3PartSize is the part size of multipart uploads (the most an upload
	// buffers).
	s3PartSize = 16 << 20
)

// s3Bucket serves a bucket (under a prefix) as a filesystem: keys are
// paths, "/" separates directories, a directory exists while a key lies
// under it (or its "dir/" marker object does, which Mkdir makes).
//
// Reads are streamed: a read opens a GET of the object from its offset to
// the end and later reads that continue where it stopped reuse it (at most
// maxS3Readers open; a read elsewhere opens another). Writes go to a temp
// file on the host, one per written file (seeded with the object when the
// write does not start it afresh), uploaded on the guest's close or fsync
// (Flush) and on Close; memory stays bounded whatever the file size.
// Renames of files are server-side copies; directories do not rename
// (EXDEV: mv copies). There are no symlinks, modes or times.
type s3Bucket struct {
	cl     *minio.Client
	bucket string
	prefix string // "" or ends with "/"
	tmp    string // the directory of pending writes' temp files
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pending map[string]*os.File  // path → its written, not yet uploaded copy
	readers map[string]*s3Reader // path → an open streamed read
	order   []string             // readers, oldest first
}

// s3Reader is an open GET of an object from pos to its end.
type s3Reader struct {
	body io.ReadCloser
	pos  int64
}

// s3Creds parses a secret holding ACCESS_KEY:SECRET_KEY.
func s3Creds(v []byte) (string, string, error) {
	ak, sk, ok := strings.Cut(strings.TrimSpace(string(v)), ":")
	if !ok || ak == "" || sk == "" {
		return "", "", errors.New("the secret must hold ACCESS_KEY:SECRET_KEY")
	}
	return ak, sk, nil
}

// newS3Client makes a client for an endpoint such as https://s3.amazonaws.com
// or http://127.0.0.1:9000.
func newS3Client(endpoint, region, ak, sk string) (*minio.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("endpoint %q: want http(s)://host[:port]", endpoint)
	}
	return minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(ak, sk, ""), Secure: u.Scheme == "https", Region: region})
}

// openS3 opens a bucket mount; probe checks that the bucket answers a
// listing with these credentials.
func openS3(ctx context.Context, sp Spec, creds []byte, probe bool) (*s3Bucket, error) {
	ak, sk, err := s3Creds(creds)
	if err != nil {
		return nil, fmt.Errorf("%w: secret %s: %v", ErrInvalid, sp.Secret, err)
	}
	cl, err := newS3Client(sp.Endpoint, sp.Region, ak, sk)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	prefix := strings.Trim(sp.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	if probe {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for obj := range cl.ListObjects(pctx, sp.Bucket, minio.ListObjectsOptions{Prefix: prefix, MaxKeys: 1}) {
			if obj.Err != nil {
				return nil, fmt.Errorf("%w: bucket %s at %s: %v", ErrInvalid, sp.Bucket, sp.Endpoint, obj.Err)
			}
			break
		}
	}
	tmp, err := os.MkdirTemp("", "agentbox-s3-")
	if err != nil {
		return nil, err
	}
	bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
	return &s3Bucket{cl: cl, bucket: sp.Bucket, prefix: prefix, tmp: tmp, ctx: bctx, cancel: bcancel,
		pending: map[string]*os.File{}, readers: map[string]*s3Reader{}}, nil
}

// key is p's object key; dirKey the prefix of the keys under directory p.
func (s *s3Bucket) key(p string) string { return s.prefix + p }

func (s *s3Bucket) dirKey(p string) string {
	if p == "." {
		return s.prefix
	}
	return s.prefix + p + "/"
}

func (s *s3Bucket) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s3CallTimeout)
}

// s3Err maps a bucket error to an errno.
func s3Err(err error) error {
	if err == nil {
		return nil
	}
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchKey", "NotFound":
		return syscall.ENOENT
	case "AccessDenied":
		return syscall.EACCES
	}
	return err
}

func fileAttr(p string, size int64, mt time.Time) *agentv1.MountAttr {
	return &agentv1.MountAttr{Ino: nameIno(p), Mode: syscall.S_IFREG | 0o644, Size: uint64(size), MtimeNs: mt.UnixNano(), Nlink: 1}
}

func dirAttr(p string) *agentv1.MountAttr {
	return &agentv1.MountAttr{Ino: nameIno(p), Mode: syscall.S_IFDIR | 0o755, Nlink: 2}
}

func (s *s3Bucket) Lstat(p string) (*agentv1.MountAttr, error) {
	if p == "." {
		return dirAttr(p), nil
	}
	s.mu.Lock()
	f := s.pending[p]
	var fi fs.FileInfo
	var err error
	if f != nil {
		fi, err = f.Stat()
	}
	s.mu.Unlock()
	if f != nil {
		if err != nil {
			return nil, err
		}
		return fileAttr(p, fi.Size(), fi.ModTime()), nil
	}
	ctx, cancel := s.call()
	defer cancel()
	info, err := s.cl.StatObject(ctx, s.bucket, s.key(p), minio.StatObjectOptions{})
	if err == nil {
		return fileAttr(p, info.Size, info.LastModified), nil
	}
	if err = s3Err(err); !errors.Is(err, syscall.ENOENT) {
		return nil, err
	}
	for obj := range s.cl.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.dirKey(p), MaxKeys: 1}) {
		if obj.Err != nil {
			return nil, s3Err(obj.Err)
		}
		return dirAttr(p), nil
	}
	return nil, syscall.ENOENT
}

// ReadDir lists one level (delimiter "/"): objects are files, common
// prefixes directories. The listing streams in the client's pages and
// stops once offset+max entries are seen. With plus, a file's attributes
// are the listing's (or its pending write's), a directory's the fixed ones.
func (s *s3Bucket) ReadDir(p string, offset, max int, plus bool) ([]*agentv1.MountDirEntry, bool, error) {
	ctx, cancel := s.call()
	defer cancel()
	dir := s.dirKey(p)
	var out []*agentv1.MountDirEntry
	dirs := map[string]struct{}{}
	seen := 0
	for obj := range s.cl.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: dir}) {
		if obj.Err != nil {
			return nil, false, s3Err(obj.Err)
		}
		name := strings.TrimPrefix(obj.Key, dir)
		mode := uint32(syscall.S_IFREG)
		if strings.HasSuffix(name, "/") {
			name, mode = strings.TrimSuffix(name, "/"), syscall.S_IFDIR
		}
		if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
			continue // the directory's own marker, or a key FUSE cannot name
		}
		if mode == syscall.S_IFDIR {
			// A "d/" marker object may come both as an object and as the
			// common prefix of the keys under it.
			if _, dup := dirs[name]; dup {
				continue
			}
			dirs[name] = struct{}{}
		}
		if seen++; seen <= offset {
			continue
		}
		if len(out) == max {
			return out, false, nil
		}
		e := &agentv1.MountDirEntry{Name: name, Mode: mode, Ino: nameIno(path.Join(p, name))}
		if plus {
			e.Attr = s.listedAttr(path.Join(p, name), mode, obj)
		}
		out = append(out, e)
	}
	return out, true, nil
}

// listedAttr is the attributes of a listed entry: a directory's fixed
// ones, a pending write's temp file's, or the listed object's.
func (s *s3Bucket) listedAttr(p string, mode uint32, obj minio.ObjectInfo) *agentv1.MountAttr {
	if mode == syscall.S_IFDIR {
		return dirAttr(p)
	}
	s.mu.Lock()
	f := s.pending[p]
	s.mu.Unlock()
	if f != nil {
		return nil // its size changes under the guest's writes: looked up
	}
	return fileAttr(p, obj.Size, obj.LastModified)
}

// ReadAt reads a pending write's temp file, or streams the object.
func (s *s3Bucket) ReadAt(p string, buf []byte, off int64) (int, error) {
	s.mu.Lock()
	if f := s.pending[p]; f != nil {
		defer s.mu.Unlock()
		n, err := f.ReadAt(buf, off)
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return n, err
	}
	r := s.readers[p]
	if r != nil && r.pos != off {
		s.dropReader(p)
		r = nil
	}
	delete(s.readers, p) // held by this call alone while it reads
	s.mu.Unlock()
	if r == nil {
		var err error
		if r, err = s.openReader(p, off); err != nil || r == nil {
			return 0, err
		}
	}
	n, err := io.ReadFull(r.body, buf)
	r.pos += int64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		r.body.Close()
		return n, nil
	}
	if err != nil {
		r.body.Close()
		return n, s3Err(err)
	}
	s.keepReader(p, r)
	return n, nil
}

// openReader starts a GET of p from off; nil (no error) past the end.
func (s *s3Bucket) openReader(p string, off int64) (*s3Reader, error) {
	opts := minio.GetObjectOptions{}
	if off > 0 {
		if err := opts.SetRange(off, 0); err != nil {
			return nil, err
		}
	}
	// The GET lives past this call (a later read continues it): bound it by
	// the mount's life, and each read by the connection's own deadlines.
	core := minio.Core{Client: s.cl}
	body, _, _, err := core.GetObject(s.ctx, s.bucket, s.key(p), opts)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "InvalidRange" {
			return nil, nil
		}
		return nil, s3Err(err)
	}
	return &s3Reader{body: body, pos: off}, nil
}

// keepReader keeps r for p's next read, closing the oldest beyond the bound.
func (s *s3Bucket) keepReader(p string, r *s3Reader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.readers[p]; old != nil {
		old.body.Close()
	}
	s.readers[p] = r
	s.order = append(removeString(s.order, p), p)
	for len(s.order) > maxS3Readers {
		s.dropReader(s.order[0])
	}
}

// dropReader closes p's open read (s.mu held).
func (s *s3Bucket) dropReader(p string) {
	if r := s.readers[p]; r != nil {
		r.body.Close()
		delete(s.readers, p)
	}
	s.order = removeString(s.order, p)
}

func removeString(list []string, v string) []string {
	for i, x := range list {
		if x == v {
			return append(list[:i:i], list[i+1:]...)
		}
	}
	return list
}
