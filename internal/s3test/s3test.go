// Package s3test runs an S3-compatible server on loopback for tests: the
// in-process gofakes3 server over its memory backend, behind a check of the
// request's access key (gofakes3 checks no signatures), so that a client
// with other credentials is refused with AccessDenied.
package s3test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Credentials the server accepts.
const (
	AccessKey = "AKIDAGENTBOXTEST"
	SecretKey = "s3test-secret-key-never-in-the-guest"
)

// Server is a running test server.
type Server struct {
	// Endpoint is its http://127.0.0.1:port.
	Endpoint string
	// Client is a client with the accepted credentials.
	Client *minio.Client

	be  *s3mem.Backend
	srv *httptest.Server

	down atomic.Bool
	mu   sync.Mutex
	reqs []request // the requests answered, for Count
}

type request struct{ method, key string }

// Start starts a server holding the given buckets (empty); it stops when
// the test ends.
func Start(t testing.TB, buckets ...string) *Server {
	t.Helper()
	s, err := New(buckets...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a server holding the given buckets (empty); Close stops it.
func New(buckets ...string) (*Server, error) {
	be := s3mem.New()
	for _, b := range buckets {
		if err := be.CreateBucket(b); err != nil {
			return nil, err
		}
	}
	faker := gofakes3.New(be)
	s := &Server{be: be}
	s.srv = httptest.NewServer(s.faults(requireKey(faker.Server())))
	s.Endpoint = s.srv.URL
	host := strings.TrimPrefix(s.srv.URL, "http://")
	cl, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")})
	if err != nil {
		s.srv.Close()
		return nil, err
	}
	s.Client = cl
	return s, nil
}

// faults counts the requests and, while the server is down, refuses them
// with 503 ServiceUnavailable.
func (s *Server) faults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>down (s3test)</Message></Error>`)
			return
		}
		// Path style: /bucket/key.
		_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		s.mu.Lock()
		if len(s.reqs) < 1<<17 { // bounded: a long test does not grow it forever
			s.reqs = append(s.reqs, request{r.Method, key})
		}
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// SetDown makes the server refuse every request (503) until SetDown(false).
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Count is how many requests of method (GET, PUT, HEAD, DELETE) the
// server answered for keys that start with keyPrefix ("" = any key; the
// key is without the bucket).
func (s *Server) Count(method, keyPrefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.reqs {
		if r.method == method && strings.HasPrefix(r.key, keyPrefix) {
			n++
		}
	}
	return n
}

// ResetCounts forgets the requests counted so far.
func (s *Server) ResetCounts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = nil
}

// Flip flips one byte (at off, modulo the object's size) of a stored
// object, in the backend, to play a corrupted store.
func (s *Server) Flip(bucket, key string, off int) error {
	obj, err := s.be.GetObject(bucket, key, nil)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(obj.Contents)
	_ = obj.Contents.Close()
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return fmt.Errorf("s3test: flip %s/%s: empty object", bucket, key)
	}
	data[off%len(data)] ^= 0xff
	return s.PutDirect(bucket, key, data)
}

// Keys lists a bucket's keys that start with prefix, from the backend.
func (s *Server) Keys(bucket, prefix string) ([]string, error) {
	res, err := s.be.ListBucket(bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range res.Contents {
		out = append(out, o.Key)
	}
	return out, nil
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// PutDirect stores an object in the backend, without a request (to fill a
// bucket fast).
func (s *Server) PutDirect(bucket, key string, data []byte) error {
	_, err := s.be.PutObject(bucket, key, map[string]string{}, bytes.NewReader(data), int64(len(data)), nil)
	return err
}

// requireKey refuses requests not signed with AccessKey.
func requireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		signed := strings.Contains(r.Header.Get("Authorization"), "Credential="+AccessKey+"/") ||
			strings.HasPrefix(r.URL.Query().Get("X-Amz-Credential"), AccessKey+"/")
		if !signed {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Put stores an object.
func (s *Server) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	if _, err := s.Client.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Get returns an object's content, or an error (a missing key's included).
func (s *Server) Get(bucket, key string) ([]byte, error) {
	obj, err := s.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return io.ReadAll(obj)
}
