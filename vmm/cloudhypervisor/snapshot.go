package cloudhypervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// Files of a snapshot directory. Cloud Hypervisor writes config.json (the
// VmConfig), state.json (device state) and memory-ranges (guest memory); we
// add the backend marker.
const (
	markerFile   = "backend"
	markerValue  = "cloud-hypervisor\n"
	configFile   = "config.json"
	memoryFile   = "memory-ranges"
	snapshotMode = 0o755
)

// writeMarker marks dir as a snapshot of this backend.
func writeMarker(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(markerValue), 0o644); err != nil {
		return fmt.Errorf("cloudhypervisor: write snapshot marker: %w", err)
	}
	return nil
}

// checkMarker refuses, with vmm.ErrUnsupported, a dir that no Cloud
// Hypervisor VM of ours wrote.
func checkMarker(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s has no %q marker: not a cloud-hypervisor snapshot (snapshots restore only on the backend that made them)", vmm.ErrUnsupported, dir, markerFile)
	case err != nil:
		return fmt.Errorf("cloudhypervisor: read snapshot marker: %w", err)
	case string(b) != markerValue:
		return fmt.Errorf("%w: %s is a snapshot of backend %q, not cloud-hypervisor (snapshots restore only on the backend that made them)", vmm.ErrUnsupported, dir, string(bytes.TrimSpace(b)))
	}
	return nil
}

// checkEmptyDir reports whether dir exists, is a directory and is empty.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cloudhypervisor: snapshot dir: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("cloudhypervisor: snapshot dir %s is not empty", dir)
	}
	return nil
}

// moveSnapshot moves the files Cloud Hypervisor wrote into staging to dir.
// Both are on one filesystem in the intended layout (the data directory),
// so each move is a rename. On failure dir is left empty again.
func moveSnapshot(staging, dir string) error {
	entries, err := os.ReadDir(staging)
	if err != nil {
		return fmt.Errorf("cloudhypervisor: read snapshot: %w", err)
	}
	for i, e := range entries {
		if err := os.Rename(filepath.Join(staging, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			for _, moved := range entries[:i] {
				_ = os.Remove(filepath.Join(dir, moved.Name()))
			}
			return fmt.Errorf("cloudhypervisor: move snapshot into place (the VM dir and the snapshot dir must share a filesystem): %w", err)
		}
	}
	return os.Remove(staging)
}

// restoreEdits are the paths a restored VM must not share with the VM that
// wrote the snapshot.
type restoreEdits struct {
	vsockSocket string
	disks       []string // one per disk of the snapshot, in order
	// diskLimits are the disks' rate limiters (nil: none), in that order:
	// the snapshot's are its VM's, this sandbox's may differ.
	diskLimits []*chapi.RateLimiterConfig
	serialFile string
	// landlock and landlockRules replace landlock_enable and
	// landlock_rules: the old VM's rules name its own directory, and this
	// host may lack Landlock.
	landlock      bool
	landlockRules []chapi.LandlockConfig
	// netLimit, if set, replaces a NIC's rate_limiter_config.
	netLimit *netLimitEdit
}

// netLimitEdit sets the NIC id's rate limiter (nil removes it).
type netLimitEdit struct {
	id      string
	limiter *chapi.RateLimiterConfig
}

// rewriteConfig edits a snapshot's config.json for a new VM. It works on the
// raw JSON so that fields this package (or the pinned spec) does not know
// pass through unchanged.
func rewriteConfig(raw []byte, e restoreEdits) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("cloudhypervisor: %s: %w", configFile, err)
	}
	err := errors.Join(
		editObject(top, "vsock", true, map[string]any{"socket": e.vsockSocket}),
		editObject(top, "serial", false, map[string]any{"mode": chapi.ConsoleModeFile, "file": e.serialFile}),
		editDisks(top, e.disks, e.diskLimits),
		editNetLimit(top, e.netLimit),
	)
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: %s: %w", configFile, err)
	}
	if err := setField(top, "landlock_enable", e.landlock); err != nil {
		return nil, err
	}
	delete(top, "landlock_rules")
	if e.landlock {
		if err := setField(top, "landlock_rules", e.landlockRules); err != nil {
			return nil, err
		}
	}
	return json.MarshalIndent(top, "", "  ")
}

// editObject sets fields of the object top[key]. A missing object is an
// error when required, and is created otherwise.
func editObject(top map[string]json.RawMessage, key string, required bool, fields map[string]any) error {
	obj := map[string]json.RawMessage{}
	switch v, ok := top[key]; {
	case ok && string(v) != "null":
		if err := json.Unmarshal(v, &obj); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	case required:
		return fmt.Errorf("the snapshot has no %s device", key)
	}
	for k, v := range fields {
		if err := setField(obj, k, v); err != nil {
			return err
		}
	}
	return setField(top, key, obj)
}

func editDisks(top map[string]json.RawMessage, paths []string, limits []*chapi.RateLimiterConfig) error {
	var disks []map[string]json.RawMessage
	if v, ok := top["disks"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &disks); err != nil {
			return fmt.Errorf("disks: %w", err)
		}
	}
	if len(disks) != len(paths) {
		return fmt.Errorf("the snapshot has %d disks, the config %d", len(disks), len(paths))
	}
	if len(disks) == 0 {
		return nil
	}
	for i := range disks {
		if err := setField(disks[i], "path", paths[i]); err != nil {
			return err
		}
		if limits == nil {
			continue
		}
		delete(disks[i], "rate_limiter_config")
		if i < len(limits) && limits[i] != nil {
			if err := setField(disks[i], "rate_limiter_config", limits[i]); err != nil {
				return err
			}
		}
	}
	return setField(top, "disks", disks)
}

func editNetLimit(top map[string]json.RawMessage, e *netLimitEdit) error {
	v, ok := top["net"]
	if e == nil || !ok || string(v) == "null" {
		return nil
	}
	var nets []map[string]json.RawMessage
	if err := json.Unmarshal(v, &nets); err != nil {
		return fmt.Errorf("net: %w", err)
	}
	for _, n := range nets {
		var id string
		if err := json.Unmarshal(n["id"], &id); err != nil || id != e.id {
			continue
		}
		delete(n, "rate_limiter_config")
		if e.limiter != nil {
			if err := setField(n, "rate_limiter_config", e.limiter); err != nil {
				return err
			}
		}
	}
	return setField(top, "net", nets)
}

func setField[M ~map[string]json.RawMessage](m M, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cloudhypervisor: encode %s: %w", key, err)
	}
	m[key] = b
	return nil
}

// prepareRestoreDir fills dst, a directory of the restored VM's own, from
// the snapshot in src: config.json rewritten with e, memory-ranges and the
// other files hard-linked (never copied: guest memory can be large, and
// forks of one snapshot then share its pages in the page cache).
func prepareRestoreDir(src, dst string, e restoreEdits) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("cloudhypervisor: clear restore dir: %w", err)
	}
	if err := os.Mkdir(dst, snapshotMode); err != nil {
		return fmt.Errorf("cloudhypervisor: restore dir: %w", err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("cloudhypervisor: read snapshot: %w", err)
	}
	seen := map[string]bool{}
	for _, ent := range entries {
		name := ent.Name()
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		switch {
		case name == markerFile:
			continue
		case name == configFile:
			raw, err := os.ReadFile(from)
			if err != nil {
				return fmt.Errorf("cloudhypervisor: read snapshot: %w", err)
			}
			edited, err := rewriteConfig(raw, e)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, edited, 0o600); err != nil {
				return fmt.Errorf("cloudhypervisor: write %s: %w", configFile, err)
			}
		case ent.Type().IsRegular():
			if err := os.Link(from, to); err != nil {
				return fmt.Errorf("cloudhypervisor: link %s (the snapshot and the VM dir must share a filesystem): %w", name, err)
			}
		default:
			return fmt.Errorf("cloudhypervisor: snapshot entry %s is not a regular file", name)
		}
		seen[name] = true
	}
	for _, want := range []string{configFile, memoryFile} {
		if !seen[want] {
			return fmt.Errorf("cloudhypervisor: snapshot %s has no %s", src, want)
		}
	}
	return nil
}
