// Package s3test runs an S3-compatible server on loopback for tests: the
// in-process gofakes3 server over its memory backend, behind a check of the
// request's access key (gofakes3 checks no signatures), so that a client
// with other credentials is refused with AccessDenied.
package s3test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
}

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
	srv := httptest.NewServer(requireKey(faker.Server()))
	host := strings.TrimPrefix(srv.URL, "http://")
	cl, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")})
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &Server{Endpoint: srv.URL, Client: cl, be: be, srv: srv}, nil
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
