package fleettest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentbox/agentbox/internal/s3test"
)

// StoreBucket is the bucket of the fleet's snapshot store
// (Options.SnapshotStore).
const StoreBucket = "agentbox-fleet"

// storePrefix is the prefix of the store's keys in StoreBucket.
const storePrefix = "fleet"

// bucket is the fleet's snapshot store: an s3test server (on loopback)
// and, in front of it on the bridge address so the hosts' namespaces
// reach it, a proxy that counts GETs and can play an outage.
//
// The proxy is the kit's own (a few lines of httputil.ReverseProxy)
// because s3test listens on loopback only; s3test checks access keys, not
// signatures, so the changed Host header does not matter.
type bucket struct {
	s3   *s3test.Server
	l    net.Listener
	srv  *http.Server
	wg   sync.WaitGroup
	down atomic.Bool
	mu   sync.Mutex
	gets map[string]int // by the key's first path element
}

func startBucket(ip string) (*bucket, error) {
	s3, err := s3test.New(StoreBucket)
	if err != nil {
		return nil, fmt.Errorf("fleettest: snapshot store: %w", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		s3.Close()
		return nil, fmt.Errorf("fleettest: snapshot store: %w", err)
	}
	u, _ := url.Parse(s3.Endpoint)
	b := &bucket{s3: s3, l: l, gets: map[string]int{}}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.down.Load() {
			http.Error(w, "the snapshot store is down (fleettest)", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodGet {
			b.count(r.URL.Path)
		}
		rp.ServeHTTP(w, r)
	})}
	b.wg.Add(1)
	go func() { defer b.wg.Done(); _ = b.srv.Serve(l) }()
	return b, nil
}

// count records a GET of /bucket/fleet/kind/... (the store URL's prefix
// is "fleet") under kind.
func (b *bucket) count(path string) {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 4)
	kind := ""
	if len(parts) >= 3 && parts[1] == storePrefix {
		kind = parts[2]
	}
	b.mu.Lock()
	b.gets[kind]++
	b.mu.Unlock()
}

func (b *bucket) close() {
	if b == nil {
		return
	}
	_ = b.srv.Close()
	b.wg.Wait()
	b.s3.Close()
}

// StoreURL is the snapshot store's URL as the hosts and gateways give it
// to --snapshot-store ("" without Options.SnapshotStore).
func (f *Fleet) StoreURL() string {
	if f.bucket == nil {
		return ""
	}
	return fmt.Sprintf("s3://%s/%s?endpoint=http://%s&region=us-east-1", StoreBucket, storePrefix, f.bucket.l.Addr())
}

// Store is the snapshot store's server (to read, change or flip objects).
func (f *Fleet) Store() *s3test.Server { return f.bucket.s3 }

// StoreDown makes the snapshot store refuse every request (503) or serve
// again.
func (f *Fleet) StoreDown(down bool) { f.bucket.down.Store(down) }

// StoreGets is how many GETs the hosts made of keys under prefix (the
// first path element: "chunks", "manifests", "refs").
func (f *Fleet) StoreGets(prefix string) int {
	f.bucket.mu.Lock()
	defer f.bucket.mu.Unlock()
	return f.bucket.gets[prefix]
}

// storeEnv is the snapshot store's credentials, for a host's or a
// gateway's environment.
func (f *Fleet) storeEnv() []string {
	if f.bucket == nil {
		return nil
	}
	return []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
}
