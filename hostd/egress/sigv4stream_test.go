package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// awsChunked encodes payload as a chunk-signed body in chunks of size,
// with signatures chained as SigV4's streaming spec has them (made with
// the guest's placeholder secret: the proxy strips them).
func awsChunked(payload []byte, size int, seed string) string {
	var b strings.Builder
	prev := seed
	sign := func(chunk []byte) string {
		sum := sha256.Sum256(chunk)
		s := sha256.Sum256([]byte(prev + hex.EncodeToString(sum[:])))
		prev = hex.EncodeToString(s[:])
		return prev
	}
	for len(payload) > 0 {
		n := min(size, len(payload))
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n%s\r\n", n, sign(payload[:n]), payload[:n])
		payload = payload[n:]
	}
	fmt.Fprintf(&b, "0;chunk-signature=%s\r\n\r\n", sign(nil))
	return b.String()
}

func chunkedRequest(t *testing.T, url, body string, decoded int) *http.Request {
	t.Helper()
	r := guestRequest(t, url, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", body)
	r.Header.Set("Content-Encoding", "aws-chunked")
	r.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(decoded))
	return r
}

// TestResignChunked: a chunk-signed upload goes upstream as the payload
// alone, UNSIGNED-PAYLOAD, signed with the real key; a body whose framing
// or length lies is cut off, never passed on as the payload.
func TestResignChunked(t *testing.T) {
	up := verifier(t)
	defer up.Close()
	placeholders := map[string]string{fakeAKID: "aws"}
	secret := realAKID + ":" + realSecret
	payload := strings.Repeat("0123456789abcdef", 10000) // 160 kB: several chunks
	r := chunkedRequest(t, up.URL, awsChunked([]byte(payload), 64<<10, "seed"), len(payload))
	if err := resignAWS(context.Background(), r, "aws", secret, placeholders); err != nil {
		t.Fatal(err)
	}
	if r.ContentLength != int64(len(payload)) || r.Header.Get("Content-Encoding") != "" || r.Header.Get("X-Amz-Content-Sha256") != "UNSIGNED-PAYLOAD" {
		t.Errorf("re-signed request: length %d, encoding %q, hash %q", r.ContentLength, r.Header.Get("Content-Encoding"), r.Header.Get("X-Amz-Content-Sha256"))
	}
	if code, body := send(t, r); code != http.StatusOK || body != "accepted "+payload {
		t.Errorf("re-signed chunked upload: %d, %d bytes", code, len(body))
	}

	bad := map[string]struct {
		body    string
		decoded int
	}{
		"longer than declared":  {awsChunked([]byte("hello world"), 4, "s"), 5},
		"shorter than declared": {awsChunked([]byte("hello"), 4, "s"), 11},
		"no signature":          {"5\r\nhello\r\n0\r\n\r\n", 5},
		"bad size":              {"zz;chunk-signature=" + strings.Repeat("0", 64) + "\r\nhello\r\n", 5},
		"cut short":             {"5;chunk-signature=" + strings.Repeat("0", 64) + "\r\nhel", 5},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			r := chunkedRequest(t, up.URL, tc.body, tc.decoded)
			if err := resignAWS(context.Background(), r, "aws", secret, placeholders); err != nil {
				return // refused before the body (none of these)
			}
			if _, err := io.ReadAll(r.Body); err == nil {
				t.Errorf("decoded %q without an error", tc.body)
			}
		})
	}
	r = chunkedRequest(t, up.URL, awsChunked([]byte("x"), 4, "s"), 1)
	r.Header.Del("X-Amz-Decoded-Content-Length")
	if err := resignAWS(context.Background(), r, "aws", secret, placeholders); err == nil {
		t.Error("a chunk-signed request without its decoded length was re-signed")
	}
}

// presignVerifier is an upstream that checks a presigned URL's signature
// with the real secret, as S3 does.
func presignVerifier(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		scope, err := parseSigV4("AWS4-HMAC-SHA256 Credential=" + q.Get("X-Amz-Credential"))
		at, terr := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
		if err != nil || terr != nil || scope.accessKey != realAKID {
			http.Error(w, "bad credential", http.StatusForbidden)
			return
		}
		got := q.Get("X-Amz-Signature")
		for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature"} {
			q.Del(k)
		}
		cp, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.Path+"?"+q.Encode(), nil)
		signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: realAKID, SecretAccessKey: realSecret},
			cp, "UNSIGNED-PAYLOAD", scope.service, scope.region, at)
		u, _ := url.Parse(signed)
		if err != nil || u.Query().Get("X-Amz-Signature") != got {
			http.Error(w, "signature does not match", http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, "accepted "+r.URL.Path)
	}))
}

// presigned is a URL the guest presigned with its placeholder key.
func presigned(t *testing.T, base string, at time.Time, expires int) *http.Request {
	t.Helper()
	r, _ := http.NewRequest(http.MethodGet, base+"/bucket/key?x-id=GetObject&X-Amz-Expires="+strconv.Itoa(expires), nil)
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: fakeAKID, SecretAccessKey: fakeSecret},
		r, "UNSIGNED-PAYLOAD", "s3", "us-east-1", at)
	if err != nil {
		t.Fatal(err)
	}
	r, _ = http.NewRequest(http.MethodGet, signed, nil)
	return r
}

// TestResignPresigned: a URL the guest presigned with its placeholder is
// signed again with the real key, within what is left of its expiry; an
// expired one, or one of another key, is refused.
func TestResignPresigned(t *testing.T) {
	up := presignVerifier(t)
	defer up.Close()
	placeholders := map[string]string{fakeAKID: "aws"}
	secret := realAKID + ":" + realSecret
	if code, _ := send(t, presigned(t, up.URL, time.Now(), 600)); code != http.StatusForbidden {
		t.Errorf("the guest's own presigned URL: %d, want 403", code)
	}
	r := presigned(t, up.URL, time.Now().Add(-time.Minute), 600)
	if err := resignAWS(context.Background(), r, "aws", secret, placeholders); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.URL.RawQuery, fakeAKID) {
		t.Error("placeholder left in the URL")
	}
	if exp, _ := strconv.Atoi(r.URL.Query().Get("X-Amz-Expires")); exp > 540 || exp < 1 {
		t.Errorf("X-Amz-Expires %d, want what is left of the guest's (≤ 540)", exp)
	}
	if code, body := send(t, r); code != http.StatusOK || body != "accepted /bucket/key" {
		t.Errorf("re-signed presigned URL: %d %q", code, body)
	}
	if err := resignAWS(context.Background(), presigned(t, up.URL, time.Now().Add(-time.Hour), 60), "aws", secret, placeholders); err == nil {
		t.Error("an expired presigned URL was re-signed")
	}
	if err := resignAWS(context.Background(), presigned(t, up.URL, time.Now(), 60), "aws", secret, map[string]string{"other": "aws"}); err == nil {
		t.Error("a URL presigned with a foreign key was re-signed")
	}
}
