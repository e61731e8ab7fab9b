package chunks

import (
	"container/list"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// cache is the local chunk cache: one file per chunk (its compressed
// bytes, named by digest) in a directory, bounded by bytes, least
// recently used evicted first. It survives a restart: openCache scans the
// directory, ordering by modification time (which get touches).
//
// Hand-rolled on container/list: the LRU is a few lines, and the
// libraries on hand bound entries by count, not by bytes on disk.
type cache struct {
	dir   string
	bound int64

	mu    sync.Mutex
	total int64
	lru   *list.List               // front = most recent; values *entry
	idx   map[string]*list.Element // digest -> element
}

type entry struct {
	digest string
	size   int64
}

func openCache(dir string, bound int64) (*cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("chunks: cache: %w", err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("chunks: cache: %w", err)
	}
	type found struct {
		e     entry
		mtime time.Time
	}
	var all []found
	for _, de := range des {
		name := de.Name()
		if !digestRE.MatchString(name) {
			if len(name) > 5 && name[:5] == ".tmp-" { // a write a crash interrupted
				_ = os.Remove(filepath.Join(dir, name))
			}
			continue
		}
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		all = append(all, found{entry{name, fi.Size()}, fi.ModTime()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.After(all[j].mtime) })
	c := &cache{dir: dir, bound: bound, lru: list.New(), idx: map[string]*list.Element{}}
	for _, f := range all {
		e := f.e
		c.idx[e.digest] = c.lru.PushBack(&e)
		c.total += e.size
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

func (c *cache) path(d string) string { return filepath.Join(c.dir, d) }

// get returns a chunk's compressed bytes, or false.
func (c *cache) get(d string) ([]byte, bool) {
	c.mu.Lock()
	el, ok := c.idx[d]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	b, err := os.ReadFile(c.path(d))
	if err != nil {
		c.drop(d)
		return nil, false
	}
	t := time.Now()
	_ = os.Chtimes(c.path(d), t, t) // the order a restart sees
	return b, true
}

// has reports whether the cache holds d.
func (c *cache) has(d string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.idx[d]
	return ok
}

// put stores a chunk's compressed bytes (a chunk over the bound is not kept).
func (c *cache) put(d string, b []byte) {
	if int64(len(b)) > c.bound || c.has(d) {
		return
	}
	f, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(d))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.idx[d]; ok { // a racing put of the same chunk
		c.lru.MoveToFront(el)
		return
	}
	c.idx[d] = c.lru.PushFront(&entry{d, int64(len(b))})
	c.total += int64(len(b))
	c.evictLocked()
}

// drop removes a chunk (a corrupt one).
func (c *cache) drop(d string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.idx[d]; ok {
		c.removeLocked(el)
	}
}

func (c *cache) evictLocked() {
	for c.total > c.bound && c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back())
	}
}

func (c *cache) removeLocked(el *list.Element) {
	e := el.Value.(*entry)
	c.lru.Remove(el)
	delete(c.idx, e.digest)
	c.total -= e.size
	_ = os.Remove(c.path(e.digest))
}

func (c *cache) used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
