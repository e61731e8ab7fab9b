//go:build vm

package hostd_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/nettest"
	"github.com/agentbox/agentbox/internal/s3test"
)

// s3Front verifies each request's SigV4 signature with the real keys (as
// S3 would) and passes what verifies on to an s3test server, which checks
// only the access key.
type s3Front struct {
	ver      *sigv4Verifier
	to       *httputil.ReverseProxy
	trailers atomic.Int64 // aws-chunked bodies with a trailing checksum, checked
}

// unchunkTrailer decodes an unsigned aws-chunked body (hex size, CRLF,
// data, CRLF, ..., a last chunk of 0, then the trailer lines) and checks
// its x-amz-checksum-crc32 trailer, as S3 does.
func unchunkTrailer(b []byte, trailer string) ([]byte, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	var out bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("aws-chunked: chunk header: %w", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil || n < 0 || n > int64(len(b)) {
			return nil, fmt.Errorf("aws-chunked: chunk size %q", line)
		}
		if n == 0 {
			break
		}
		if _, err := io.CopyN(&out, br, n); err != nil {
			return nil, fmt.Errorf("aws-chunked: chunk: %w", err)
		}
		if crlf, _ := br.ReadString('\n'); crlf != "\r\n" {
			return nil, fmt.Errorf("aws-chunked: chunk without its CRLF")
		}
	}
	rest, _ := io.ReadAll(br)
	want := ""
	for _, l := range strings.Split(string(rest), "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, trailer) {
			want = strings.TrimSpace(v)
		}
	}
	sum := crc32.ChecksumIEEE(out.Bytes())
	got := base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	if trailer != "x-amz-checksum-crc32" || want != got {
		return nil, fmt.Errorf("aws-chunked: trailer %s %q, the body's crc32 is %q", trailer, want, got)
	}
	return out.Bytes(), nil
}

func newS3Front(t *testing.T, s3 *s3test.Server) *s3Front {
	u, err := url.Parse(s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return &s3Front{ver: &sigv4Verifier{akid: s3test.AccessKey, secret: s3test.SecretKey},
		to: httputil.NewSingleHostReverseProxy(u)}
}

func (f *s3Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if msg := f.ver.verify(r, body); msg != "" {
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	if r.Header.Get("X-Amz-Content-Sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER" {
		// S3 decodes an unsigned aws-chunked body and checks its trailing
		// checksum; gofakes3 would store the framing.
		if body, err = unchunkTrailer(body, r.Header.Get("X-Amz-Trailer")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.trailers.Add(1)
		r.Header.Del("Content-Encoding")
		r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	f.to.ServeHTTP(w, r)
}

// TestS3UploaderFromGuest: aws-sdk-go-v2's own multipart uploader, run in
// a guest with placeholder keys, uploads through the proxy's aws rule to an
// S3 that verifies every signature with the real keys; the object arrives
// whole. The SDK sends each part as an unsigned aws-chunked body with a
// trailing CRC32 (STREAMING-UNSIGNED-PAYLOAD-TRAILER, its default over
// HTTPS), not a chunk-signed one: the proxy re-signs its seed and passes
// the body and trailer through, which the upstream decodes and checks.
func TestS3UploaderFromGuest(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "s3upload")
	build := exec.Command("go", "build", "-o", bin, "github.com/agentbox/agentbox/internal/s3test/s3upload")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build s3upload: %v\n%s", err, out)
	}
	s3 := s3test.Start(t, "uploads")
	up := nettest.New(t)
	front := newS3Front(t, s3)
	up.Route("other.test", front)
	c, _ := startNetHostd(t, up)
	ctx := context.Background()
	if _, err := c.CreateSecret(ctx, "s3", s3test.AccessKey+":"+s3test.SecretKey); err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512,
		Network: &client.NetworkPolicyInput{
			Inject: []client.InjectRule{{Host: "other.test", Kind: "aws", Value: "{{secret:s3}}"}},
		},
		SecretEnv: map[string]string{"AWS_ACCESS_KEY_ID": "s3", "AWS_SECRET_ACCESS_KEY": "s3"},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer func() { _ = c.DeleteSandbox(ctx, sb.ID) }()
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 12<<20) // three parts of 5 MiB (the last shorter)
	_, _ = rand.Read(data)
	for path, b := range map[string][]byte{"/root/s3upload": prog, "/root/data.bin": data} {
		if err := c.WriteFile(ctx, sb.ID, path, 0o755, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	r := mustExec(t, c, sb.ID, "/root/s3upload", "-endpoint", "https://other.test", "-bucket", "uploads",
		"-key", "from-guest.bin", "-part-mib", "5", "/root/data.bin")
	if r.ExitCode != 0 {
		if evs, err := c.NetworkEvents(ctx, sb.ID, 0, 20); err == nil {
			for _, e := range evs {
				t.Logf("egress: %+v", *e.Network)
			}
		}
		t.Fatalf("s3upload: exit %d\nstdout %s\nstderr %s\nupstream saw: %v", r.ExitCode, r.Stdout, r.Stderr, front.ver.auths)
	}
	t.Logf("guest: %s", strings.TrimSpace(r.Stdout))
	obj, err := s3.Client.GetObject(ctx, "uploads", "from-guest.bin", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("object in the store: %d bytes, not the %d the guest uploaded", len(got), len(data))
	}
	t.Logf("parts with a trailing checksum (aws-chunked, decoded and checked upstream): %d", front.trailers.Load())
	if !strings.Contains(r.Stdout, "in 3 parts") {
		t.Errorf("guest's upload was not multipart in 3 parts: %q", r.Stdout)
	}
}
