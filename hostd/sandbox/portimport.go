package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/snapshot/chunks"
)

// ErrIncompatible refuses an import of a snapshot made with another
// kernel, initramfs or base image than this host boots.
var ErrIncompatible = errors.New("sandbox: the snapshot needs a kernel, initramfs or base image this host does not have")

// importSandbox makes sandbox id, which this host does not hold, from its
// paused state in the snapshot store: the snapshots under it that the
// host lacks, then its directory (fetched and verified under a temporary
// name, renamed when whole), then its records, paused. A digest error or
// any other failure leaves nothing of it behind.
func (m *Manager) importSandbox(ctx context.Context, id string) error {
	p := m.port
	p.imports.Lock()
	defer p.imports.Unlock()
	if _, err := m.opts.Store.GetSandbox(ctx, id); err == nil {
		return nil // imported by the caller before
	}
	start := time.Now()
	ref, err := p.st.GetRef(ctx, refSandboxes, id)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return storeErr(err)
	}
	man, err := p.st.Manifest(ctx, ref.Manifest)
	if err != nil {
		return storeErr(err)
	}
	if err := m.compatible(man); err != nil {
		return err
	}
	var meta pausedMeta
	if err := json.Unmarshal(man.Meta, &meta); err != nil || meta.Sandbox.ID != id || len(meta.Chain) == 0 || meta.Overlay != meta.Chain[0] {
		return fmt.Errorf("%w: manifest %s: its records do not describe sandbox %s", ErrCorrupt, man.ID, id)
	}
	for _, n := range meta.Chain {
		if chunks.ValidName(n) != nil {
			return fmt.Errorf("%w: manifest %s: disk layer %q", ErrCorrupt, man.ID, n)
		}
	}
	if meta.Services != nil {
		if err := meta.Services.Validate(); err != nil {
			return fmt.Errorf("%w: manifest %s: its service records: %w", ErrCorrupt, man.ID, err)
		}
	}
	if err := validMovedExecs(meta.Execs); err != nil {
		return fmt.Errorf("%w: manifest %s: its execs: %w", ErrCorrupt, man.ID, err)
	}
	if meta.SnapshotID != man.Parent {
		return fmt.Errorf("%w: manifest %s: snapshot %s, parent %s", ErrCorrupt, man.ID, meta.SnapshotID, man.Parent)
	}
	below := m.opts.BaseImage
	if man.Parent != "" {
		sn, err := m.importLineage(ctx, man.Parent)
		if err != nil {
			return err
		}
		below = filepath.Join(sn.Dir, snapshot.LayerFile)
	}
	final := filepath.Join(m.opts.DataDir, "sandboxes", id)
	if _, err := os.Stat(final); err == nil {
		return fmt.Errorf("sandbox: import %s: %s exists without a record (the reaper removes it)", id, final)
	}
	tmp, err := os.MkdirTemp(filepath.Join(m.opts.DataDir, "sandboxes"), ".import-"+id+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	stats, err := p.st.Fetch(ctx, man, tmp)
	if err != nil {
		return fmt.Errorf("sandbox: import %s: %w", id, storeErr(err))
	}
	if err := m.placeImported(ctx, tmp, final, meta.Chain, below); err != nil {
		return fmt.Errorf("sandbox: import %s: %w", id, err)
	}
	if err := writeDurable(tmp, durable{Manifest: man.ID, At: man.Created}); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	// The disk layers are the VMM user's, as a new sandbox's are.
	err = m.jail.claim(final)
	for _, n := range meta.Chain {
		if err == nil {
			err = ownFiles(filepath.Join(final, n))
		}
	}
	if err == nil {
		err = m.importRecords(ctx, meta, final)
	}
	if err != nil {
		os.RemoveAll(final)
		return fmt.Errorf("sandbox: import %s: %w", id, err)
	}
	m.recordMovedExecs(ctx, id, meta.Execs)
	m.log.Info("sandbox imported from the snapshot store", "sandbox_id", id, "manifest", man.ID, "from_host", ref.Host,
		"bytes", stats.Bytes, "fetched_chunks", stats.Fetched, "cache_hits", stats.CacheHits, "fetched_bytes", stats.TransferBytes, "took", time.Since(start))
	return nil
}

// compatible refuses a manifest that needs guest assets this host lacks.
func (m *Manager) compatible(man chunks.Manifest) error {
	have, err := m.requires()
	if err != nil {
		return err
	}
	var bad []string
	for k, want := range man.Requires {
		if got := have[k]; got != want {
			bad = append(bad, fmt.Sprintf("%s %s (this host has %s)", k, want, orNone(got)))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%w: %s needs %s", ErrIncompatible, man.ID, strings.Join(bad, ", "))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// placeImported moves a fetched paused manifest's files in dir where a
// sandbox directory has them (p_ files into paused/, d_ files at the top)
// and rebases its disk chain onto the final directory's paths, the last
// layer onto below.
func (m *Manager) placeImported(ctx context.Context, dir, final string, chain []string, below string) error {
	if err := os.Mkdir(filepath.Join(dir, "paused"), 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		var to string
		switch {
		case strings.HasPrefix(n, pausedPrefix):
			to = filepath.Join(dir, "paused", strings.TrimPrefix(n, pausedPrefix))
		case strings.HasPrefix(n, diskPrefix):
			to = filepath.Join(dir, strings.TrimPrefix(n, diskPrefix))
		default:
			continue
		}
		if err := os.Rename(filepath.Join(dir, n), to); err != nil {
			return err
		}
	}
	for i, n := range chain {
		next := below
		if i+1 < len(chain) {
			next = filepath.Join(final, chain[i+1])
		}
		if next == "" {
			continue
		}
		if err := disk.Rebase(ctx, filepath.Join(dir, n), next); err != nil {
			return err
		}
	}
	return nil
}

// importRecords writes an imported sandbox's records, the sandbox's row
// last (until it exists the sandbox does not).
func (m *Manager) importRecords(ctx context.Context, meta pausedMeta, dir string) error {
	id := meta.Sandbox.ID
	v := store.SandboxVM{ID: id, SnapshotID: meta.SnapshotID, Overlay: filepath.Join(dir, meta.Overlay), PauseDir: filepath.Join(dir, "paused"),
		Cwd: meta.Cwd, User: meta.User}
	err := m.opts.Store.PutSandboxVM(ctx, v)
	if err == nil && len(meta.Limits) > 0 && string(meta.Limits) != "null" {
		err = m.opts.Store.PutSandboxLimits(ctx, id, meta.Limits)
	}
	if ns, ok := m.opts.Store.(networkStore); ok && err == nil && len(meta.Network) > 0 {
		err = ns.PutNetworkPolicy(ctx, id, meta.Network)
	}
	if os, ok := m.opts.Store.(ownerStore); ok && err == nil && meta.Owner != nil {
		err = os.SetOwner(ctx, store.KindSandbox, id, *meta.Owner)
	}
	sv := m.services.get()
	if sv != nil && err == nil && meta.Services != nil {
		if err = sv.SetServiceRecords(id, *meta.Services); err != nil {
			err = fmt.Errorf("%w: its service records: %w", ErrCorrupt, err)
		}
	}
	if err == nil {
		rec := meta.Sandbox
		rec.Dir, rec.State, rec.VMPID, rec.Error = dir, string(StatePaused), 0, ""
		err = m.opts.Store.PutSandbox(ctx, rec)
	}
	if err != nil {
		_ = m.opts.Store.DeleteSandboxVM(context.WithoutCancel(ctx), id)
		_ = m.opts.Store.DeleteSandboxLimits(context.WithoutCancel(ctx), id)
		if sv != nil && meta.Services != nil {
			_ = sv.Forget(id)
		}
	}
	return err
}

// importLineage makes snapshot id (a manifest of the store) and those
// under it local, oldest first, each verified and whole or not at all,
// and returns id's record.
func (m *Manager) importLineage(ctx context.Context, id string) (snapshot.Record, error) {
	var todo []chunks.Manifest
	for sid := id; sid != ""; {
		if sn, err := m.opts.Store.GetSnapshot(ctx, sid); err == nil {
			if len(todo) == 0 {
				return sn, nil
			}
			break
		}
		man, err := m.port.st.Manifest(ctx, sid)
		if err != nil {
			return snapshot.Record{}, fmt.Errorf("sandbox: snapshot %s: %w", sid, storeErr(err))
		}
		if man.Kind != "snapshot" || man.ID != sid {
			return snapshot.Record{}, fmt.Errorf("%w: manifest %s is a %s", ErrCorrupt, sid, man.Kind)
		}
		if err := m.compatible(man); err != nil {
			return snapshot.Record{}, err
		}
		todo = append(todo, man)
		sid = man.Parent
		if len(todo) > 64 {
			return snapshot.Record{}, fmt.Errorf("%w: snapshot %s: a lineage of over 64", ErrCorrupt, id)
		}
	}
	var last snapshot.Record
	for i := len(todo) - 1; i >= 0; i-- {
		sn, err := m.importSnapshot(ctx, todo[i])
		if err != nil {
			return snapshot.Record{}, err
		}
		last = sn
	}
	return last, nil
}

// importSnapshot fetches snapshot manifest man (whose parent is local)
// into the snapshots directory, rebases its layer, writes its checksums
// and records it.
func (m *Manager) importSnapshot(ctx context.Context, man chunks.Manifest) (snapshot.Record, error) {
	var meta snapshotMeta
	if err := json.Unmarshal(man.Meta, &meta); err != nil || meta.Record.ID != man.ID || meta.Record.ParentID != man.Parent {
		return snapshot.Record{}, fmt.Errorf("%w: manifest %s: its record does not describe it", ErrCorrupt, man.ID)
	}
	below := m.opts.BaseImage
	if man.Parent != "" {
		psn, err := m.opts.Store.GetSnapshot(ctx, man.Parent)
		if err != nil {
			return snapshot.Record{}, fmt.Errorf("sandbox: snapshot %s's parent %s: %w", man.ID, man.Parent, err)
		}
		below = filepath.Join(psn.Dir, snapshot.LayerFile)
	}
	root := filepath.Join(m.opts.DataDir, "snapshots")
	final := filepath.Join(root, man.ID)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return snapshot.Record{}, err
	}
	tmp, err := os.MkdirTemp(root, ".import-"+man.ID+"-")
	if err != nil {
		return snapshot.Record{}, err
	}
	defer os.RemoveAll(tmp)
	if _, err := m.port.st.Fetch(ctx, man, tmp); err != nil {
		return snapshot.Record{}, fmt.Errorf("sandbox: import snapshot %s: %w", man.ID, storeErr(err))
	}
	layer := filepath.Join(tmp, snapshot.LayerFile)
	if _, err := os.Stat(layer); err == nil {
		if err := os.Chmod(layer, 0o600); err != nil {
			return snapshot.Record{}, err
		}
		if err := disk.Rebase(ctx, layer, below); err != nil {
			return snapshot.Record{}, err
		}
		if err := os.Chmod(layer, 0o444); err != nil {
			return snapshot.Record{}, err
		}
	}
	var names []string
	for _, f := range man.Files {
		names = append(names, f.Name)
	}
	// The chunks were verified by digest; the checksums are of the files
	// as they are here (the layer names this host's backing path).
	if _, err := snapshot.WriteManifest(tmp, names); err != nil {
		return snapshot.Record{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return snapshot.Record{}, err
	}
	sn := meta.Record
	sn.Dir = final
	// A base snapshot of another host is not this host's to find by its
	// cache key (its own base snapshots are).
	sn.CacheKey = ""
	if err := m.opts.Store.PutSnapshot(ctx, sn); err != nil {
		os.RemoveAll(final)
		return snapshot.Record{}, err
	}
	if os, ok := m.opts.Store.(ownerStore); ok && meta.Owner != nil {
		_ = os.SetOwner(ctx, store.KindSnapshot, sn.ID, *meta.Owner)
	}
	m.log.Info("snapshot imported from the snapshot store", "snapshot_id", sn.ID)
	return sn, nil
}

// refTemplates is the refs' kind of templates.
const refTemplates = "templates"

// templateExport is Templates.export with a snapshot store (nil without).
func (m *Manager) templateExport() func(ctx context.Context, name, snapshotID string) error {
	if m.port == nil {
		return nil
	}
	return func(ctx context.Context, name, snapshotID string) error {
		req, err := m.requires()
		if err != nil {
			return err
		}
		id, err := m.exportLineage(ctx, snapshotID, "", req)
		if err != nil {
			return err
		}
		return storeErr(m.port.st.PutRef(ctx, refTemplates, name, chunks.Ref{Manifest: id, Generation: time.Now().UnixNano(), Host: m.port.host}))
	}
}

// importTemplate makes template name, which another host made, local: its
// snapshot's lineage is fetched once; later creates find it here. Absent
// from the store it is store.ErrNotFound.
func (m *Manager) importTemplate(ctx context.Context, name string) (store.Template, error) {
	m.port.imports.Lock()
	defer m.port.imports.Unlock()
	if t, err := m.opts.Store.GetTemplate(ctx, name); err == nil {
		return t, nil
	}
	ref, err := m.port.st.GetRef(ctx, refTemplates, name)
	if errors.Is(err, fs.ErrNotExist) {
		return store.Template{}, fmt.Errorf("template %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Template{}, storeErr(err)
	}
	sn, err := m.importLineage(ctx, ref.Manifest)
	if err != nil {
		return store.Template{}, err
	}
	t := store.Template{Name: name, SnapshotID: sn.ID, CreatedAt: time.Now().UTC()}
	if err := m.opts.Store.PutTemplate(ctx, t); err != nil {
		return store.Template{}, err
	}
	m.log.Info("template imported from the snapshot store", "template", name, "snapshot_id", sn.ID, "from_host", ref.Host)
	return t, nil
}

// importSnapshotByID makes snapshot id, taken on another host, local
// (store.ErrNotFound when the store has no manifest of it).
func (m *Manager) importSnapshotByID(ctx context.Context, id string) error {
	if !chunks.ValidID(id) {
		return fmt.Errorf("snapshot %s: %w", id, store.ErrNotFound)
	}
	m.port.imports.Lock()
	defer m.port.imports.Unlock()
	if _, err := m.port.st.GetRef(ctx, refSnapshots, id); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("snapshot %s: %w", id, store.ErrNotFound)
	} else if err != nil {
		return storeErr(err)
	}
	_, err := m.importLineage(ctx, id)
	return err
}
