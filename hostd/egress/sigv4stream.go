package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Chunk-signed uploads and presigned URLs, as SDKs send them.
//
// A chunk-signed body (X-Amz-Content-Sha256 STREAMING-AWS4-HMAC-SHA256-
// PAYLOAD, Content-Encoding aws-chunked) chains each chunk's signature to
// the previous one, seeded by the header signature: re-signing the header
// breaks every chunk's. The guest signed its chunks with its placeholder
// secret, which proves nothing to the proxy (the guest is the sender), so
// the proxy strips them: unchunk decodes the body to its payload, which
// goes upstream as an UNSIGNED-PAYLOAD request of the decoded length
// (X-Amz-Decoded-Content-Length), signed with the host's credentials. SigV4
// allows an unsigned payload for S3; TLS to the upstream carries its
// integrity, as it does for the SDKs' own UNSIGNED-PAYLOAD requests.
//
// A presigned URL (query-string SigV4, no Authorization header) is signed
// again in its query with the host's credentials, keeping the guest's
// expiry (what is left of it).

// maxChunkHeader bounds one chunk's header line ("hex;chunk-signature=…").
const maxChunkHeader = 256

// maxPresignExpiry is SigV4's longest X-Amz-Expires (7 days).
const maxPresignExpiry = 7 * 24 * time.Hour

// unchunk turns r, chunk-signed, into an UNSIGNED-PAYLOAD request whose
// body is the decoded payload.
func unchunk(r *http.Request) error {
	n, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil || n < 0 {
		return errors.New("aws: chunk-signed request without a valid X-Amz-Decoded-Content-Length")
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.Body = &chunkReader{br: bufio.NewReaderSize(r.Body, 64<<10), c: r.Body, left: n}
	r.ContentLength = n
	r.TransferEncoding = nil
	r.Header.Del("Content-Length")
	r.Header.Del("X-Amz-Decoded-Content-Length")
	var enc []string
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "aws-chunked") {
				enc = append(enc, e)
			}
		}
	}
	r.Header.Del("Content-Encoding")
	if len(enc) > 0 {
		r.Header.Set("Content-Encoding", strings.Join(enc, ","))
	}
	r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	return nil
}

// chunkReader decodes an aws-chunked body ("SIZE;chunk-signature=SIG\r\n",
// SIZE bytes, "\r\n", …, a last chunk of size 0), checking its framing and
// that it holds exactly left bytes.
type chunkReader struct {
	br   *bufio.Reader
	c    io.Closer
	left int64 // payload bytes still to come
	in   int64 // bytes left in the current chunk
	done bool
	err  error
}

func (c *chunkReader) Close() error { return c.c.Close() }

func (c *chunkReader) Read(p []byte) (int, error) {
	for c.err == nil && c.in == 0 && !c.done {
		c.err = c.next()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	n, err := c.br.Read(p[:min(int64(len(p)), c.in)])
	c.in -= int64(n)
	if c.in == 0 && err == nil {
		err = c.crlf()
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	c.err = err
	return n, err
}

// next reads a chunk's header (and, after the last, the body's end).
func (c *chunkReader) next() error {
	line, err := c.line()
	if err != nil {
		return err
	}
	size, ext, _ := strings.Cut(line, ";")
	n, err := strconv.ParseInt(size, 16, 64)
	sig, ok := strings.CutPrefix(ext, "chunk-signature=")
	if err != nil || n < 0 || !ok || len(sig) != 64 || !isHex(sig) {
		return fmt.Errorf("aws: bad aws-chunked chunk header %q", line)
	}
	if n > c.left {
		return errors.New("aws: aws-chunked body longer than X-Amz-Decoded-Content-Length")
	}
	if n == 0 {
		if c.left != 0 {
			return errors.New("aws: aws-chunked body shorter than X-Amz-Decoded-Content-Length")
		}
		c.done = true
		return c.crlf() // no trailers in STREAMING-AWS4-HMAC-SHA256-PAYLOAD
	}
	c.left -= n
	c.in = n
	return nil
}

// line reads one CRLF-terminated line, bounded.
func (c *chunkReader) line() (string, error) {
	var b []byte
	for {
		frag, err := c.br.ReadSlice('\n')
		b = append(b, frag...)
		if len(b) > maxChunkHeader {
			return "", errors.New("aws: aws-chunked chunk header too long")
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
	s, ok := strings.CutSuffix(string(b), "\r\n")
	if !ok {
		return "", errors.New("aws: aws-chunked line without CRLF")
	}
	return s, nil
}

func (c *chunkReader) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return io.ErrUnexpectedEOF
	}
	if !bytes.Equal(b[:], []byte("\r\n")) {
		return errors.New("aws: aws-chunked chunk without its CRLF")
	}
	return nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// presignParams are the query parameters of a presigned URL's signature.
var presignParams = []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
	"X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}

// isPresigned reports whether r carries a query-string SigV4 signature.
func isPresigned(r *http.Request) bool {
	return r.Header.Get("Authorization") == "" && r.URL.Query().Get("X-Amz-Algorithm") != ""
}

// resignPresigned signs r's URL again, as resignAWS does its header.
func resignPresigned(ctx context.Context, r *http.Request, secretName string, creds aws.Credentials, placeholders map[string]string) error {
	q := r.URL.Query()
	if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
		return errors.New("aws: presigned URL is not signed with AWS4-HMAC-SHA256")
	}
	scope, err := parseSigV4("AWS4-HMAC-SHA256 Credential=" + q.Get("X-Amz-Credential"))
	if err != nil {
		return err
	}
	if placeholders[scope.accessKey] != secretName {
		return errNotPlaceholder
	}
	at, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	secs, serr := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || serr != nil || secs <= 0 || time.Duration(secs)*time.Second > maxPresignExpiry {
		return errors.New("aws: presigned URL without a valid X-Amz-Date and X-Amz-Expires")
	}
	now := time.Now().UTC()
	left := at.Add(time.Duration(secs) * time.Second).Sub(now)
	if left <= 0 {
		return errors.New("aws: presigned URL expired")
	}
	left = min(left, time.Duration(secs)*time.Second) // a date in the future buys no time
	for _, k := range presignParams {
		q.Del(k)
	}
	q.Set("X-Amz-Expires", strconv.Itoa(max(int(left/time.Second), 1)))
	r.URL.RawQuery = q.Encode()
	signed, hdr, err := v4.NewSigner().PresignHTTP(ctx, creds, r, "UNSIGNED-PAYLOAD", scope.service, scope.region, now)
	if err != nil {
		return fmt.Errorf("aws: presign: %w", err)
	}
	u, err := url.Parse(signed)
	if err != nil {
		return fmt.Errorf("aws: presign: %w", err)
	}
	r.URL.RawQuery = u.RawQuery
	for k, vs := range hdr {
		if !strings.EqualFold(k, "Host") {
			r.Header[k] = vs
		}
	}
	return nil
}
