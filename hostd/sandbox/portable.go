package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/snapshot/chunks"
)

// SnapshotStore is the object store that makes pauses durable and from
// which a sandbox paused on another host is imported (*chunks.Store).
type SnapshotStore interface {
	Export(ctx context.Context, m chunks.Manifest, files map[string]string) (chunks.Manifest, chunks.Stats, error)
	Manifest(ctx context.Context, id string) (chunks.Manifest, error)
	Fetch(ctx context.Context, m chunks.Manifest, dir string) (chunks.Stats, error)
	Delete(ctx context.Context, id string) error
	PutRef(ctx context.Context, kind, name string, r chunks.Ref) error
	GetRef(ctx context.Context, kind, name string) (chunks.Ref, error)
	DeleteRef(ctx context.Context, kind, name string) error
}

var _ SnapshotStore = (*chunks.Store)(nil)

// Refs' kinds in the snapshot store.
const (
	refSandboxes = "sandboxes"
	refSnapshots = "snapshots"
)

// Names of a paused manifest's files: the paused state's files and the
// sandbox directory's disk layers, flat (a manifest's names are one path
// element).
const (
	pausedPrefix = "p_"
	diskPrefix   = "d_"
)

// durableFile, in a paused sandbox's directory, says which manifest holds
// its paused state in the snapshot store.
const durableFile = "durable.json"

// durable is what durableFile holds.
type durable struct {
	Manifest string    `json:"manifest"`
	At       time.Time `json:"at"`
}

// portable is the manager's side of the snapshot store (nil without one).
type portable struct {
	st   SnapshotStore
	host string
	// imports serializes imports (a second resume of an unknown sandbox
	// finds it imported).
	imports sync.Mutex

	reqOnce sync.Once
	req     map[string]string
	reqErr  error
}

// pausedMeta is a paused manifest's Meta: the records that make the
// sandbox again on another host. Paths are names in the sandbox directory.
type pausedMeta struct {
	Sandbox store.Sandbox `json:"sandbox"`
	// SnapshotID is the snapshot its disk overlays; Overlay its top disk
	// layer and Chain every layer in its directory, top first, each
	// backed by the next (the last by SnapshotID's layer, else the base).
	SnapshotID string          `json:"snapshot_id,omitempty"`
	Overlay    string          `json:"overlay"`
	Chain      []string        `json:"chain"`
	Cwd        string          `json:"cwd,omitempty"`
	User       string          `json:"user,omitempty"`
	Limits     json.RawMessage `json:"limits,omitempty"`
	Network    []byte          `json:"network,omitempty"`
	Owner      *store.Owner    `json:"owner,omitempty"`
	// Services are its service URLs' records (public ports, token, share
	// links' key); nil when the exporting host kept none.
	Services *ServiceRecords `json:"services,omitempty"`
	// Execs are its execs that had not ended (portexecs.go).
	Execs []movedExec `json:"execs,omitempty"`
}

// snapshotMeta is a snapshot manifest's Meta: its record (Dir is local).
type snapshotMeta struct {
	Record snapshot.Record `json:"record"`
	Owner  *store.Owner    `json:"owner,omitempty"`
}

// Optional stores the manager uses when its Store has them (hostd/store
// does): a sandbox's network policy and owner go with it to another host.
type (
	networkStore interface {
		GetNetworkPolicy(ctx context.Context, id string) ([]byte, error)
		PutNetworkPolicy(ctx context.Context, id string, policy []byte) error
	}
	ownerStore interface {
		GetOwner(ctx context.Context, kind, id string) (store.Owner, error)
		SetOwner(ctx context.Context, kind, id string, o store.Owner) error
	}
)

// storeErr classifies a snapshot store's error for the API.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, chunks.ErrCorrupt):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	case errors.Is(err, chunks.ErrUnavailable):
		return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	return err
}

// requires are the digests of the guest assets this host boots (kernel,
// initramfs, base image), computed once.
func (m *Manager) requires() (map[string]string, error) {
	p := m.port
	p.reqOnce.Do(func() {
		p.req = map[string]string{}
		for k, path := range map[string]string{"kernel": m.opts.Kernel, "initramfs": m.opts.Initramfs, "base": m.opts.BaseImage} {
			if path == "" {
				continue
			}
			d, err := snapshot.FileDigest(path)
			if err != nil {
				p.reqErr = fmt.Errorf("sandbox: digest of the %s: %w", k, err)
				return
			}
			p.req[k] = "sha256:" + d
		}
	})
	return p.req, p.reqErr
}

// diskChain lists the layers of overlay's backing chain in the sandbox
// directory dir, top first, down to the first one outside it (below
// returns it: a snapshot's layer or the base image).
func diskChain(ctx context.Context, dir, overlay string) (chain []string, below string, err error) {
	p := overlay
	for range 64 {
		if filepath.Dir(p) != filepath.Clean(dir) {
			return chain, p, nil
		}
		chain = append(chain, filepath.Base(p))
		info, err := disk.Inspect(ctx, p)
		if err != nil {
			return nil, "", err
		}
		if info.BackingFilename == "" {
			return chain, "", nil
		}
		p = info.BackingFilename
	}
	return nil, "", fmt.Errorf("sandbox: %s: a backing chain of over 64 layers", overlay)
}

// exportPaused makes b's paused state in dir durable in the snapshot
// store: the snapshots its disk is layered on (each once, as its own
// manifest), then the paused state and the sandbox's disk layers, then
// the sandbox's ref. It returns what durableFile is to hold.
func (m *Manager) exportPaused(ctx context.Context, b *runningVM, dir string) (durable, error) {
	start := time.Now()
	req, err := m.requires()
	if err != nil {
		return durable{}, err
	}
	rec, err := m.opts.Store.GetSandbox(ctx, b.id)
	if err != nil {
		return durable{}, err
	}
	chain, below, err := diskChain(ctx, b.dir, b.overlay)
	if err != nil {
		return durable{}, err
	}
	parent, err := m.exportLineage(ctx, b.snapshotID, below, req)
	if err != nil {
		return durable{}, err
	}
	meta := pausedMeta{Sandbox: rec, SnapshotID: b.snapshotID, Overlay: filepath.Base(b.overlay), Chain: chain, Cwd: b.cwd, User: b.user}
	meta.Sandbox.Dir, meta.Sandbox.VMPID = "", 0
	var lim json.RawMessage
	if err := m.opts.Store.GetSandboxLimits(ctx, b.id, &lim); err == nil {
		meta.Limits = lim
	}
	if ns, ok := m.opts.Store.(networkStore); ok {
		if pol, err := ns.GetNetworkPolicy(ctx, b.id); err == nil {
			meta.Network = pol
		}
	}
	meta.Owner = m.ownerOf(ctx, store.KindSandbox, b.id)
	if sv := m.services.get(); sv != nil {
		r, err := sv.ServiceRecords(b.id)
		if err != nil {
			return durable{}, fmt.Errorf("sandbox: service records: %w", err)
		}
		meta.Services = &r
	}
	if meta.Execs, err = m.openExecsOf(ctx, b.id); err != nil {
		// Its execs move with the guest; only this host's record of them
		// is left behind.
		m.log.Warn("paused sandbox: its open execs are not in its records", "sandbox_id", b.id, "err", err)
	}
	files := map[string]string{}
	for _, n := range chain {
		files[diskPrefix+n] = filepath.Join(b.dir, n)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return durable{}, err
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			files[pausedPrefix+e.Name()] = filepath.Join(dir, e.Name())
		}
	}
	mb, err := json.Marshal(meta)
	if err != nil {
		return durable{}, err
	}
	id := b.id + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	man, stats, err := m.port.st.Export(ctx, chunks.Manifest{ID: id, Kind: "paused", Parent: parent, Requires: req, Meta: mb}, files)
	if err != nil {
		return durable{}, storeErr(err)
	}
	old, _ := m.port.st.GetRef(ctx, refSandboxes, b.id)
	if err := m.port.st.PutRef(ctx, refSandboxes, b.id, chunks.Ref{Manifest: man.ID, Generation: time.Now().UnixNano(), Host: m.port.host}); err != nil {
		return durable{}, storeErr(err)
	}
	if old.Manifest != "" && old.Manifest != man.ID && strings.HasPrefix(old.Manifest, b.id+"-") {
		if err := m.port.st.Delete(ctx, old.Manifest); err != nil {
			m.log.Warn("delete the previous paused manifest", "sandbox_id", b.id, "manifest", old.Manifest, "err", err)
		}
	}
	m.log.Info("paused state durable", "sandbox_id", b.id, "manifest", man.ID, "bytes", stats.Bytes, "uploaded_chunks", stats.Uploaded,
		"uploaded_bytes", stats.TransferBytes, "chunks", stats.Chunks, "zero_chunks", stats.ZeroChunks, "took", time.Since(start))
	return durable{Manifest: man.ID, At: man.Created}, nil
}

// exportLineage exports snapshot id and the snapshots under it, each once
// (a manifest that exists is complete), oldest first, and returns id's
// manifest ("" without a snapshot). layer is the disk layer the
// sandbox's chain ends on, which must be id's.
func (m *Manager) exportLineage(ctx context.Context, id, layer string, req map[string]string) (string, error) {
	if id == "" {
		if layer != "" && layer != m.opts.BaseImage {
			return "", fmt.Errorf("sandbox: the disk is layered on %s, neither a snapshot nor the base image: it cannot be exported", layer)
		}
		return "", nil
	}
	var line []snapshot.Record
	for sid := id; sid != ""; {
		sn, err := m.opts.Store.GetSnapshot(ctx, sid)
		if err != nil {
			return "", fmt.Errorf("sandbox: snapshot %s: %w", sid, err)
		}
		line = append(line, sn)
		sid = sn.ParentID
		if len(line) > 64 {
			return "", fmt.Errorf("sandbox: snapshot %s: a lineage of over 64", id)
		}
	}
	if layer != "" && layer != filepath.Join(line[0].Dir, snapshot.LayerFile) {
		return "", fmt.Errorf("sandbox: the disk is layered on %s, not on its snapshot %s", layer, id)
	}
	// An importer layers the oldest snapshot on its own base image: it
	// must be layered on this host's.
	root := line[len(line)-1]
	if info, err := disk.Inspect(ctx, filepath.Join(root.Dir, snapshot.LayerFile)); err != nil {
		return "", err
	} else if info.BackingFilename != "" && info.BackingFilename != m.opts.BaseImage {
		return "", fmt.Errorf("sandbox: snapshot %s is layered on %s, not on the base image: it cannot be exported", root.ID, info.BackingFilename)
	}
	parent := ""
	for i := len(line) - 1; i >= 0; i-- {
		sn := line[i]
		if _, err := m.port.st.Manifest(ctx, sn.ID); err == nil {
			parent = sn.ID
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", storeErr(err)
		}
		if err := m.exportSnapshot(ctx, sn, parent, req); err != nil {
			return "", err
		}
		parent = sn.ID
	}
	return parent, nil
}

// exportSnapshot exports snapshot sn's files under manifest sn.ID, whose
// Parent is parent's, and its ref.
func (m *Manager) exportSnapshot(ctx context.Context, sn snapshot.Record, parent string, req map[string]string) error {
	if !chunks.ValidID(sn.ID) {
		return fmt.Errorf("sandbox: snapshot id %q is not a manifest id", sn.ID)
	}
	ents, err := os.ReadDir(sn.Dir)
	if err != nil {
		return err
	}
	files := map[string]string{}
	for _, e := range ents {
		switch n := e.Name(); {
		case !e.Type().IsRegular(), n == snapshot.ManifestFile, strings.HasSuffix(n, ".tmp"), n == "unsynced":
		default:
			files[n] = filepath.Join(sn.Dir, n)
		}
	}
	meta := snapshotMeta{Record: sn, Owner: m.ownerOf(ctx, store.KindSnapshot, sn.ID)}
	meta.Record.Dir = ""
	mb, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	man, stats, err := m.port.st.Export(ctx, chunks.Manifest{ID: sn.ID, Kind: "snapshot", Parent: parent, Requires: req, Meta: mb}, files)
	if err != nil {
		return storeErr(err)
	}
	if err := m.port.st.PutRef(ctx, refSnapshots, sn.ID, chunks.Ref{Manifest: man.ID, Generation: 1, Host: m.port.host}); err != nil {
		return storeErr(err)
	}
	m.log.Info("snapshot exported", "snapshot_id", sn.ID, "bytes", stats.Bytes, "uploaded_chunks", stats.Uploaded, "uploaded_bytes", stats.TransferBytes)
	return nil
}

// ownerOf is the owner of a resource, when the store keeps owners.
func (m *Manager) ownerOf(ctx context.Context, kind, id string) *store.Owner {
	os, ok := m.opts.Store.(ownerStore)
	if !ok {
		return nil
	}
	o, err := os.GetOwner(ctx, kind, id)
	if err != nil {
		return nil
	}
	return &o
}

// writeDurable records in sandbox dir that its paused state is d.
func writeDurable(dir string, d durable) error {
	b, _ := json.Marshal(d)
	tmp := filepath.Join(dir, durableFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, durableFile))
}

// readDurable is what sandbox dir's durableFile says (false without one).
func readDurable(dir string) (durable, bool) {
	b, err := os.ReadFile(filepath.Join(dir, durableFile))
	if err != nil || len(b) > 4096 {
		return durable{}, false
	}
	var d durable
	if json.Unmarshal(b, &d) != nil || d.Manifest == "" {
		return durable{}, false
	}
	return d, true
}

// withDurable fills info's durable fields from its directory.
func withDurable(info Info, dir string) Info {
	if info.State != StatePaused {
		return info
	}
	if d, ok := readDurable(dir); ok {
		info.Durable, info.DurableManifest, info.DurableAt = true, d.Manifest, d.At
	}
	return info
}

// forgetStored removes sandbox id's ref and paused manifest from the
// snapshot store (a delete; a release keeps them), as far as the store
// answers: a store that is down leaves them to the fleet's collector.
func (m *Manager) forgetStored(ctx context.Context, id string) {
	if m.port == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	ref, err := m.port.st.GetRef(ctx, refSandboxes, id)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err == nil && strings.HasPrefix(ref.Manifest, id+"-") {
		err = m.port.st.Delete(ctx, ref.Manifest)
	}
	if err == nil {
		err = m.port.st.DeleteRef(ctx, refSandboxes, id)
	}
	if err != nil {
		m.log.Warn("deleted sandbox: its snapshot store objects stay", "sandbox_id", id, "err", err)
	}
}
