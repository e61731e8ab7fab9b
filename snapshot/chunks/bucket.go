package chunks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Bucket is an S3-compatible bucket (minio-go implementation NewS3). Keys
// are relative to the bucket's prefix. Every failure to reach the store
// wraps ErrUnavailable.
type Bucket interface {
	Put(ctx context.Context, key string, body []byte) error
	Get(ctx context.Context, key string) ([]byte, error) // wraps fs.ErrNotExist when absent
	Has(ctx context.Context, key string) (bool, error)
	Delete(ctx context.Context, key string) error
}

// sizer is a Bucket that can also tell an object's size (S3 can: a HEAD),
// so that a deduplicated chunk's stored size is known without a GET.
type sizer interface {
	Size(ctx context.Context, key string) (int64, error) // fs.ErrNotExist when absent
}

// S3Config locates a bucket and holds the credentials to it.
type S3Config struct {
	Endpoint  string // http(s)://host:port; "" = AWS's default for the region
	Bucket    string
	Prefix    string // key prefix inside the bucket, without a trailing "/"
	Region    string
	AccessKey string
	SecretKey string
	Insecure  bool // accept a TLS certificate that does not verify
}

// ParseURL parses "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1"
// (query keys: endpoint, region, insecure=1). Credentials are not in URLs.
func ParseURL(u string) (S3Config, error) {
	p, err := url.Parse(u)
	if err != nil {
		return S3Config{}, fmt.Errorf("chunks: store url: %w", err)
	}
	if p.Scheme != "s3" {
		return S3Config{}, fmt.Errorf("chunks: store url %q: scheme must be s3://", u)
	}
	if p.User != nil {
		return S3Config{}, fmt.Errorf("chunks: store url: credentials do not belong in the url (use a credentials file or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
	}
	if p.Host == "" {
		return S3Config{}, fmt.Errorf("chunks: store url %q: no bucket", u)
	}
	cfg := S3Config{Bucket: p.Host, Prefix: strings.Trim(p.Path, "/")}
	q := p.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "insecure":
		default:
			return S3Config{}, fmt.Errorf("chunks: store url: unknown parameter %q (endpoint, region, insecure)", k)
		}
	}
	cfg.Endpoint = q.Get("endpoint")
	cfg.Region = q.Get("region")
	cfg.Insecure = q.Get("insecure") == "1" || q.Get("insecure") == "true"
	if cfg.Endpoint != "" {
		e, err := url.Parse(cfg.Endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return S3Config{}, fmt.Errorf("chunks: store url: endpoint %q must be http(s)://host[:port]", cfg.Endpoint)
		}
	}
	for _, seg := range strings.Split(cfg.Prefix, "/") {
		if seg == ".." || seg == "." || (seg == "" && cfg.Prefix != "") {
			return S3Config{}, fmt.Errorf("chunks: store url: bad prefix %q", cfg.Prefix)
		}
	}
	return cfg, nil
}

// S3 is a Bucket on an S3-compatible store through minio-go.
type S3 struct {
	cl     *minio.Client
	bucket string
	prefix string
}

// NewS3 returns the bucket cfg names. The credentials are cfg's, else the
// environment's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. It does not
// contact the store.
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("chunks: s3: no bucket")
	}
	ak, sk := cfg.AccessKey, cfg.SecretKey
	if ak == "" && sk == "" {
		ak, sk = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	}
	if ak == "" || sk == "" {
		return nil, errors.New("chunks: s3: no credentials (a credentials file or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	}
	host, secure := "s3.amazonaws.com", true
	if cfg.Region != "" && cfg.Endpoint == "" {
		host = "s3." + cfg.Region + ".amazonaws.com"
	}
	opts := &minio.Options{Creds: credentials.NewStaticV4(ak, sk, ""), Region: cfg.Region, MaxRetries: 2}
	if cfg.Endpoint != "" {
		e, err := url.Parse(cfg.Endpoint)
		if err != nil || e.Host == "" {
			return nil, fmt.Errorf("chunks: s3: endpoint %q", cfg.Endpoint)
		}
		host, secure = e.Host, e.Scheme == "https"
		opts.BucketLookup = minio.BucketLookupPath
	}
	opts.Secure = secure
	if cfg.Insecure {
		tr, err := minio.DefaultTransport(secure)
		if err != nil {
			return nil, fmt.Errorf("chunks: s3: %w", err)
		}
		tr.TLSClientConfig.InsecureSkipVerify = true
		opts.Transport = tr
	}
	cl, err := minio.New(host, opts)
	if err != nil {
		return nil, fmt.Errorf("chunks: s3: %w", err)
	}
	return &S3{cl: cl, bucket: cfg.Bucket, prefix: cfg.Prefix}, nil
}

func (b *S3) key(k string) string {
	if b.prefix == "" {
		return k
	}
	return b.prefix + "/" + k
}

// opTimeout bounds one request so a store that hangs fails the call.
const opTimeout = 2 * time.Minute

// Put stores body under key.
func (b *S3) Put(ctx context.Context, key string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err := b.cl.PutObject(ctx, b.bucket, b.key(key), bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
	return b.wrap("put", key, err)
}

// maxObject bounds what Get reads (a chunk or a manifest).
const maxObject = 64 << 20

// Get returns key's content (fs.ErrNotExist when absent).
func (b *S3) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	obj, err := b.cl.GetObject(ctx, b.bucket, b.key(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, maxObject+1))
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	if len(data) > maxObject {
		return nil, fmt.Errorf("chunks: s3: get %s: object over %d bytes", key, maxObject)
	}
	return data, nil
}

// Size returns key's size (fs.ErrNotExist when absent).
func (b *S3) Size(ctx context.Context, key string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	st, err := b.cl.StatObject(ctx, b.bucket, b.key(key), minio.StatObjectOptions{})
	if err != nil {
		return 0, b.wrap("stat", key, err)
	}
	return st.Size, nil
}

// Has reports whether key exists.
func (b *S3) Has(ctx context.Context, key string) (bool, error) {
	_, err := b.Size(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Delete removes key (absent is not an error).
func (b *S3) Delete(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	return b.wrap("delete", key, b.cl.RemoveObject(ctx, b.bucket, b.key(key), minio.RemoveObjectOptions{}))
}

// wrap maps a missing key to fs.ErrNotExist and every other failure to
// ErrUnavailable, naming the operation, the bucket and the key.
func (b *S3) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	er := minio.ToErrorResponse(err)
	if er.Code == "NoSuchKey" || (er.StatusCode == http.StatusNotFound && er.Code != "NoSuchBucket") {
		return fmt.Errorf("chunks: s3 %s %s: %w", op, key, fs.ErrNotExist)
	}
	return fmt.Errorf("%w: %s s3://%s/%s: %w", ErrUnavailable, op, b.bucket, b.key(key), err)
}

// OpenS3 is the bucket of a store URL (ParseURL), with the credentials of
// credsFile (ReadCredentials) when it is set, else of the URL or the AWS
// environment (NewS3).
func OpenS3(storeURL, credsFile string) (*S3, error) {
	cfg, err := ParseURL(storeURL)
	if err != nil {
		return nil, err
	}
	if credsFile != "" {
		if cfg.AccessKey, cfg.SecretKey, err = ReadCredentials(credsFile); err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
	}
	return NewS3(cfg)
}

// ReadCredentials reads a store's access key and secret key from a file:
// either two lines (the access key, then the secret key) or KEY=VALUE
// lines with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (any case; blank
// lines and # comments are skipped).
func ReadCredentials(path string) (access, secret string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("chunks: credentials: %w", err)
	}
	if len(b) > 64<<10 {
		return "", "", fmt.Errorf("chunks: credentials %s: over 64 KiB", path)
	}
	var plain []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch k = strings.ToUpper(strings.TrimSpace(k)); {
		case ok && k == "AWS_ACCESS_KEY_ID":
			access = strings.TrimSpace(v)
		case ok && k == "AWS_SECRET_ACCESS_KEY":
			secret = strings.TrimSpace(v)
		case ok && strings.HasPrefix(k, "AWS_"):
		default:
			plain = append(plain, line)
		}
	}
	if access == "" && secret == "" && len(plain) == 2 {
		access, secret = plain[0], plain[1]
	}
	if access == "" || secret == "" {
		return "", "", fmt.Errorf("chunks: credentials %s: want two lines (access key, secret key) or AWS_ACCESS_KEY_ID= and AWS_SECRET_ACCESS_KEY=", path)
	}
	return access, secret, nil
}
