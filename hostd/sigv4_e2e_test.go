//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/nettest"
)

// sigv4Script signs a GET of https://other.test/bucket/key with the
// placeholder keys in the environment (as an SDK would, UNSIGNED-PAYLOAD)
// and writes the headers as a curl config.
const sigv4Script = `import datetime, hashlib, hmac, os
ak, sk = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
now = datetime.datetime.now(datetime.timezone.utc)
amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
scope = day + "/us-east-1/s3/aws4_request"
signed = "host;x-amz-content-sha256;x-amz-date"
canon = "\n".join(["GET", "/bucket/key", "", "host:other.test", "x-amz-content-sha256:UNSIGNED-PAYLOAD",
    "x-amz-date:" + amz, "", signed, "UNSIGNED-PAYLOAD"])
sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canon.encode()).hexdigest()])
k = ("AWS4" + sk).encode()
for part in (day, "us-east-1", "s3", "aws4_request"):
    k = hmac.new(k, part.encode(), hashlib.sha256).digest()
sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
auth = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (ak, scope, signed, sig)
with open("/tmp/sigv4.cfg", "w") as f:
    for h in ("x-amz-content-sha256: UNSIGNED-PAYLOAD", "x-amz-date: " + amz, "Authorization: " + auth):
        f.write('header = "%s"\n' % h)
`

// sigv4Verifier answers 200 to a request whose SigV4 signature it can
// recompute with the real keys (signing a copy at the request's time), 403
// otherwise; it records the Authorization headers it saw.
type sigv4Verifier struct {
	akid, secret string
	mu           sync.Mutex
	auths        []string
}

func (v *sigv4Verifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if msg := v.verify(r, body); msg != "" {
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	_, _ = io.WriteString(w, "signature ok\n")
}

// verify records r's Authorization and says what is wrong with its
// signature ("" when it verifies with the real keys).
func (v *sigv4Verifier) verify(r *http.Request, body []byte) string {
	auth := r.Header.Get("Authorization")
	v.mu.Lock()
	v.auths = append(v.auths, auth)
	v.mu.Unlock()
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	cred, _, _ := strings.Cut(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 Credential="), ",")
	f := strings.Split(cred, "/")
	if err != nil || len(f) != 5 || f[0] != v.akid {
		return "bad credential"
	}
	cp, _ := http.NewRequest(r.Method, "https://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	_, signed, _ := strings.Cut(auth, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	for _, h := range strings.Split(signed, ";") {
		if h != "host" {
			cp.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	}
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: v.akid, SecretAccessKey: v.secret},
		cp, hash, f[3], f[2], at)
	if err != nil || cp.Header.Get("Authorization") != auth {
		return "signature does not match"
	}
	return ""
}

func (v *sigv4Verifier) last() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.auths) == 0 {
		return ""
	}
	return v.auths[len(v.auths)-1]
}

// TestSigV4ResignVM: a guest signs an S3 request with its placeholder keys;
// through the proxy's aws rule an upstream that verifies with the real keys
// accepts it, without the rule it refuses the guest's own signature, and
// the real keys are nowhere in the guest.
func TestSigV4ResignVM(t *testing.T) {
	up := nettest.New(t)
	const akid, secret = "AKIAE2EREALKEY000042", "e2e/real/secret/never/in/guest/0123456789"
	ver := &sigv4Verifier{akid: akid, secret: secret}
	up.Route("other.test", ver)
	c, data := startNetHostd(t, up)
	ctx := context.Background()
	// Named "gh" so that checkSecretAbsent finds its GH_TOKEN placeholder.
	if _, err := c.CreateSecret(ctx, "gh", akid+":"+secret); err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512,
		Network: &client.NetworkPolicyInput{
			Inject: []client.InjectRule{{Host: "other.test", Kind: "aws", Value: "{{secret:gh}}"}},
		},
		SecretEnv: map[string]string{"AWS_ACCESS_KEY_ID": "gh", "AWS_SECRET_ACCESS_KEY": "gh", "GH_TOKEN": "gh"},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer func() { _ = c.DeleteSandbox(ctx, sb.ID) }()
	for path, b := range map[string][]byte{"/root/sign.py": []byte(sigv4Script), "/root/upstream-ca.pem": up.CA.PEM} {
		if err := c.WriteFile(ctx, sb.ID, path, 0o644, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	send := func(args ...string) (string, string) {
		if r := mustExec(t, c, sb.ID, "python3", "/root/sign.py"); r.ExitCode != 0 {
			t.Fatalf("sign.py: %d %q", r.ExitCode, r.Stderr)
		}
		body, status, _ := curl(t, c, sb.ID, append([]string{"-K", "/tmp/sigv4.cfg"}, args...)...)
		return body, status
	}

	// (a) Through the aws rule: re-signed with the real keys, accepted.
	if body, status := send("https://other.test/bucket/key"); status != "200" || !strings.Contains(body, "signature ok") {
		t.Fatalf("with the aws rule: got %s %q", status, body)
	}
	if a := ver.last(); !strings.Contains(a, "Credential="+akid+"/") {
		t.Errorf("upstream's Authorization %q does not name the real key", a)
	}
	// (b) Without the rule (host still allowed, spliced): the guest's own
	// signature reaches the upstream and does not verify.
	domains, none := []string{"other.test"}, []client.InjectRule{}
	if _, err := c.PatchNetwork(ctx, sb.ID, client.NetworkPolicyPatch{AllowDomains: &domains, Inject: &none}); err != nil {
		t.Fatal(err)
	}
	if body, status := send("--cacert", "/root/upstream-ca.pem", "https://other.test/bucket/key"); status != "403" {
		t.Fatalf("guest's original signature: got %s %q, want 403", status, body)
	}
	if a := ver.last(); !strings.Contains(a, "Credential=agentbox-placeholder-gh-") {
		t.Errorf("upstream's Authorization %q, want the guest's placeholder key", a)
	}
	// (c) Neither real key is in the guest's env, disk or memory.
	checkSecretAbsent(t, c, sb.ID, data, secret)
	checkSecretAbsent(t, c, sb.ID, data, akid)
}
