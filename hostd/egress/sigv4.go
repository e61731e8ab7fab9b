package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// KindAWS is the injection rule kind that re-signs AWS SigV4 requests: the
// guest signs with placeholder keys (its secret_env tokens), and the proxy
// checks that the request names one of them, strips the guest's signature
// and signs again with the secret, whose value is
// "ACCESS_KEY_ID:SECRET_ACCESS_KEY". The rule's Value names the secret as
// {{secret:NAME}}; its Header is unused.
const KindAWS = "aws"

// maxSignedBody is the most body the proxy reads to hash a request that did
// not send its payload hash (services other than S3 need the body's hash).
const maxSignedBody = 8 << 20

// errNotPlaceholder refuses a request that the guest did not sign with one
// of its placeholder keys.
var errNotPlaceholder = errors.New("aws: request not signed with the sandbox's placeholder access key")

// credentialScope is what the guest's Authorization header says it signed.
type credentialScope struct{ accessKey, region, service string }

// parseSigV4 reads the Credential of an "AWS4-HMAC-SHA256 Credential=AKID/
// DATE/REGION/SERVICE/aws4_request, SignedHeaders=..., Signature=..." header.
func parseSigV4(auth string) (credentialScope, error) {
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return credentialScope{}, errors.New("aws: request is not signed with AWS4-HMAC-SHA256")
	}
	for _, part := range strings.Split(rest, ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential=")
		if !ok {
			continue
		}
		f := strings.Split(v, "/")
		if len(f) != 5 || f[4] != "aws4_request" || f[0] == "" || f[2] == "" || f[3] == "" {
			return credentialScope{}, fmt.Errorf("aws: bad credential scope %q", v)
		}
		return credentialScope{accessKey: f[0], region: f[2], service: f[3]}, nil
	}
	return credentialScope{}, errors.New("aws: no Credential in the Authorization header")
}

// resignAWS replaces r's SigV4 signature: the guest's must name a
// placeholder token of secretName; the new one is made with secretValue
// ("ACCESS_KEY_ID:SECRET_ACCESS_KEY"). Streamed and unsigned payloads keep
// their X-Amz-Content-Sha256; chunk-signed ones are decoded to an unsigned
// payload, and presigned URLs signed again in their query (sigv4stream.go).
func resignAWS(ctx context.Context, r *http.Request, secretName, secretValue string, placeholders map[string]string) error {
	akid, secret, ok := strings.Cut(secretValue, ":")
	if !ok || akid == "" || secret == "" {
		return fmt.Errorf("aws: secret %q is not ACCESS_KEY_ID:SECRET_ACCESS_KEY", secretName)
	}
	creds := aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret}
	if isPresigned(r) {
		return resignPresigned(ctx, r, secretName, creds, placeholders)
	}
	scope, err := parseSigV4(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	if placeholders[scope.accessKey] != secretName {
		return errNotPlaceholder
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case hash == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD":
		if err := unchunk(r); err != nil { // sigv4stream.go
			return err
		}
		hash = "UNSIGNED-PAYLOAD"
	case strings.HasPrefix(hash, "STREAMING-AWS4-HMAC-SHA256"):
		return errors.New("aws: chunk-signed payloads with signed trailers cannot be re-signed; use STREAMING-AWS4-HMAC-SHA256-PAYLOAD or an unsigned payload (UNSIGNED-PAYLOAD or STREAMING-UNSIGNED-PAYLOAD-TRAILER)")
	case hash == "":
		if hash, err = hashBody(r); err != nil {
			return err
		}
	}
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
		r.Header.Del(h)
	}
	return v4.NewSigner().SignHTTP(ctx, creds, r, hash, scope.service, scope.region, time.Now().UTC())
}

// hashBody reads r's body (bounded), puts it back and returns its SHA-256.
func hashBody(r *http.Request) (string, error) {
	if r.Body == nil || r.Body == http.NoBody {
		sum := sha256.Sum256(nil)
		return hex.EncodeToString(sum[:]), nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxSignedBody+1))
	if err != nil {
		return "", fmt.Errorf("aws: read body: %w", err)
	}
	if len(b) > maxSignedBody {
		return "", fmt.Errorf("aws: body over %d bytes without X-Amz-Content-Sha256", maxSignedBody)
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
