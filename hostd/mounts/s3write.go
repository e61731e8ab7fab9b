package mounts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/minio/minio-go/v7"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// pendingFile returns p's temp file, making it (seeded with the object's
// content unless fresh) when p has none. s.mu is held.
func (s *s3Bucket) pendingFile(p string, fresh bool) (*os.File, error) {
	if f := s.pending[p]; f != nil {
		return f, nil
	}
	if len(s.pending) >= maxS3Pending {
		return nil, syscall.ENFILE
	}
	s.dropReader(p)
	f, err := os.CreateTemp(s.tmp, "w-")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name()) // the open file is all that is needed
	if !fresh {
		if err := s.seed(f, p); err != nil {
			f.Close()
			return nil, err
		}
	}
	s.pending[p] = f
	return f, nil
}

// seed copies p's object into f (a missing object leaves f empty).
func (s *s3Bucket) seed(f *os.File, p string) error {
	ctx, cancel := context.WithTimeout(s.ctx, s3UploadTimeout)
	defer cancel()
	body, _, _, err := minio.Core{Client: s.cl}.GetObject(ctx, s.bucket, s.key(p), minio.GetObjectOptions{})
	if err != nil {
		if err = s3Err(err); errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return err
	}
	defer body.Close()
	_, err = io.Copy(f, body)
	return err
}

func (s *s3Bucket) WriteAt(p string, data []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.pendingFile(p, false)
	if err != nil {
		return 0, err
	}
	return f.WriteAt(data, off)
}

// Create starts p afresh (an empty pending file) and uploads it empty, so
// that the object exists at once, as a created file does.
func (s *s3Bucket) Create(p string, _ fs.FileMode, excl bool) error {
	if excl {
		if _, err := s.Lstat(p); err == nil {
			return syscall.EEXIST
		}
	}
	s.mu.Lock()
	if old := s.pending[p]; old != nil {
		old.Close()
		delete(s.pending, p)
	}
	_, err := s.pendingFile(p, true)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Flush(p)
}

// Flush uploads p's pending file, if any, and forgets it.
func (s *s3Bucket) Flush(p string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropReader(p)
	f := s.pending[p]
	if f == nil {
		return nil
	}
	if err := s.upload(p, f); err != nil {
		return err
	}
	delete(s.pending, p)
	return f.Close()
}

// upload puts f's content as p's object (s.mu held: the mount's other
// calls wait for it, which keeps a file's upload and its next write in order
// and makes one upload per mount at a time). A big file goes in multipart
// parts of s3PartSize, one at a time, so an upload holds at most a part in
// memory.
func (s *s3Bucket) upload(p string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, s3UploadTimeout)
	defer cancel()
	// Payloads go unsigned (UNSIGNED-PAYLOAD, as the client always does over
	// https): over http it would use the aws-chunked streaming signature,
	// which S3-compatible servers do not all decode (gofakes3 stores the
	// chunk framing of multipart parts) and which sends an empty body
	// without its Content-Length.
	_, err = s.cl.PutObject(ctx, s.bucket, s.key(p), io.NewSectionReader(f, 0, fi.Size()), fi.Size(),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true,
			PartSize: s3PartSize, NumThreads: 1})
	return s3Err(err)
}

func (s *s3Bucket) Mkdir(p string, _ fs.FileMode) error {
	if _, err := s.Lstat(p); err == nil {
		return syscall.EEXIST
	}
	ctx, cancel := s.call()
	defer cancel()
	_, err := s.cl.PutObject(ctx, s.bucket, s.dirKey(p), strings.NewReader(""), 0, minio.PutObjectOptions{DisableContentSha256: true})
	return s3Err(err)
}

func (s *s3Bucket) Symlink(string, string) error    { return syscall.EPERM }
func (s *s3Bucket) Readlink(string) (string, error) { return "", syscall.EINVAL }

// Remove deletes a file's object, or an empty directory's marker.
func (s *s3Bucket) Remove(p string, dir bool) error {
	a, err := s.Lstat(p)
	if err != nil {
		return err
	}
	isDir := a.Mode&syscall.S_IFMT == syscall.S_IFDIR
	switch {
	case dir && !isDir:
		return syscall.ENOTDIR
	case !dir && isDir:
		return syscall.EISDIR
	}
	ctx, cancel := s.call()
	defer cancel()
	if dir {
		for obj := range s.cl.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.dirKey(p), Recursive: true}) {
			if obj.Err != nil {
				return s3Err(obj.Err)
			}
			if obj.Key != s.dirKey(p) {
				return syscall.ENOTEMPTY
			}
		}
		return s3Err(s.cl.RemoveObject(ctx, s.bucket, s.dirKey(p), minio.RemoveObjectOptions{}))
	}
	s.mu.Lock()
	if f := s.pending[p]; f != nil {
		f.Close()
		delete(s.pending, p)
	}
	s.dropReader(p)
	s.mu.Unlock()
	err = s.cl.RemoveObject(ctx, s.bucket, s.key(p), minio.RemoveObjectOptions{})
	if errors.Is(s3Err(err), syscall.ENOENT) {
		return nil // it was only pending
	}
	return s3Err(err)
}

// Rename copies a file's object server-side and deletes the old one;
// directories answer EXDEV (mv then copies them).
func (s *s3Bucket) Rename(from, to string) error {
	a, err := s.Lstat(from)
	if err != nil {
		return err
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EXDEV
	}
	if err := s.Flush(from); err != nil {
		return err
	}
	s.mu.Lock()
	if f := s.pending[to]; f != nil {
		f.Close()
		delete(s.pending, to)
	}
	s.dropReader(to)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, s3UploadTimeout)
	defer cancel()
	if _, err := s.cl.CopyObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: s.key(to)},
		minio.CopySrcOptions{Bucket: s.bucket, Object: s.key(from)}); err != nil {
		return s3Err(err)
	}
	return s3Err(s.cl.RemoveObject(ctx, s.bucket, s.key(from), minio.RemoveObjectOptions{}))
}

// SetAttr truncates (through the pending file); modes and times are not
// kept by a bucket and are ignored.
func (s *s3Bucket) SetAttr(p string, req *agentv1.MountSetAttrRequest) error {
	if req.Size == nil {
		return nil
	}
	if a, err := s.Lstat(p); err != nil {
		return err
	} else if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.pendingFile(p, *req.Size == 0)
	if err != nil {
		return err
	}
	return f.Truncate(int64(*req.Size))
}

// Close uploads what is still pending (best effort), closes the open reads
// and removes the temp directory.
func (s *s3Bucket) Close() error {
	s.mu.Lock()
	var errs []error
	for p, f := range s.pending {
		if err := s.upload(p, f); err != nil {
			errs = append(errs, fmt.Errorf("upload %s: %w", p, err))
		}
		f.Close()
	}
	s.pending = map[string]*os.File{}
	for p := range s.readers {
		s.dropReader(p)
	}
	s.mu.Unlock()
	s.cancel()
	errs = append(errs, os.RemoveAll(s.tmp))
	return errors.Join(errs...)
}
