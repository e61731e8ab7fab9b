package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	realAKID   = "AKIAREALKEY000000000"
	realSecret = "real/secret/key/never/in/the/guest/000"
	fakeAKID   = "abph_placeholder_akid"
	fakeSecret = "abph_placeholder_secret"
)

// verifier is a test upstream that checks SigV4 signatures with the real
// secret: it signs a copy of the request itself, at the request's time,
// and compares.
func verifier(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		scope, err := parseSigV4(r.Header.Get("Authorization"))
		if err != nil || scope.accessKey != realAKID {
			http.Error(w, "bad access key", http.StatusForbidden)
			return
		}
		at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		if err != nil {
			http.Error(w, "bad date", http.StatusForbidden)
			return
		}
		cp, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), strings.NewReader(string(body)))
		// Only the headers the signature names, as AWS does.
		auth := r.Header.Get("Authorization")
		_, signed, _ := strings.Cut(auth, "SignedHeaders=")
		signed, _, _ = strings.Cut(signed, ",")
		for _, h := range strings.Split(signed, ";") {
			if h != "host" {
				cp.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
			}
		}
		hash := r.Header.Get("X-Amz-Content-Sha256")
		if hash == "" { // services other than S3 hash the body themselves
			sum := sha256.Sum256(body)
			hash = hex.EncodeToString(sum[:])
		}
		err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: realAKID, SecretAccessKey: realSecret},
			cp, hash, scope.service, scope.region, at)
		if err != nil || cp.Header.Get("Authorization") != r.Header.Get("Authorization") {
			http.Error(w, "signature does not match", http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, "accepted "+string(body))
	}))
}

// guestRequest is what the guest's SDK sends: signed with placeholders.
func guestRequest(t *testing.T, url, hash, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodPut, url+"/bucket/key?x-id=PutObject", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if hash != "" {
		r.Header.Set("X-Amz-Content-Sha256", hash)
	}
	sign := hash
	if sign == "" {
		sign = "UNSIGNED-PAYLOAD"
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: fakeAKID, SecretAccessKey: fakeSecret},
		r, sign, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if hash == "" {
		r.Header.Del("X-Amz-Content-Sha256")
	}
	return r
}

func send(t *testing.T, r *http.Request) (int, string) {
	t.Helper()
	r.RequestURI = ""
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestResignAWS(t *testing.T) {
	up := verifier(t)
	defer up.Close()
	placeholders := map[string]string{fakeAKID: "aws", fakeSecret: "aws"}
	secret := realAKID + ":" + realSecret

	// The guest's own signature is refused by the upstream.
	if code, _ := send(t, guestRequest(t, up.URL, "UNSIGNED-PAYLOAD", "data")); code != http.StatusForbidden {
		t.Errorf("guest's original request: %d, want 403", code)
	}
	for _, hash := range []string{"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", ""} {
		r := guestRequest(t, up.URL, hash, "data")
		if err := resignAWS(context.Background(), r, "aws", secret, placeholders); err != nil {
			t.Fatalf("hash %q: %v", hash, err)
		}
		if strings.Contains(r.Header.Get("Authorization"), fakeAKID) {
			t.Errorf("hash %q: placeholder left in Authorization", hash)
		}
		if code, body := send(t, r); code != http.StatusOK || body != "accepted data" {
			t.Errorf("hash %q: re-signed request: %d %q", hash, code, body)
		}
	}
	// Refusals: not the placeholder, chunk-signed, a bad secret value.
	r := guestRequest(t, up.URL, "UNSIGNED-PAYLOAD", "x")
	if err := resignAWS(context.Background(), r, "aws", secret, map[string]string{"other": "aws"}); !errors.Is(err, errNotPlaceholder) {
		t.Errorf("foreign access key: %v", err)
	}
	r = guestRequest(t, up.URL, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "x")
	if err := resignAWS(context.Background(), r, "aws", secret, placeholders); err == nil {
		t.Error("chunk-signed payload with signed trailers re-signed")
	}
	r = guestRequest(t, up.URL, "UNSIGNED-PAYLOAD", "x")
	if err := resignAWS(context.Background(), r, "aws", "no-colon", placeholders); err == nil {
		t.Error("bad secret value accepted")
	}
}

func TestAWSRuleValidate(t *testing.T) {
	ok := Policy{Mode: ModeProxy, Inject: []InjectRule{{Host: "s3.test", Kind: KindAWS, Value: "{{secret:aws}}"}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []InjectRule{{Host: "s3.test", Kind: KindAWS, Value: "none"}, {Host: "s3.test", Kind: "gcp", Header: "X", Value: "v"}} {
		if err := (Policy{Mode: ModeProxy, Inject: []InjectRule{r}}).Validate(); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%+v: %v", r, err)
		}
	}
}
