package watch

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path"
	"strings"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Package managers and actions as the proto spells them.
const (
	managerPip  = "pip"
	managerNpm  = "npm"
	managerDpkg = "dpkg"

	actionInstalled = "installed"
	actionRemoved   = "removed"
	actionUpgraded  = "upgraded"
)

// maxMetadataBytes bounds what is read of a METADATA or package.json file.
const maxMetadataBytes = 1 << 20

// detector derives package events from file events. It is used by the
// watcher's goroutine only.
type detector struct {
	dpkgStatus string            // path of dpkg's status file
	dpkg       map[string]string // installed package → version, last parse
	pip        map[string]pkgID  // *.dist-info dir → what it installed
	npm        map[string]pkgID  // package.json path → what it holds
}

// pkgID is a package name and version.
type pkgID struct{ name, version string }

func newDetector(dpkgStatus string) *detector {
	d := &detector{dpkgStatus: dpkgStatus, pip: map[string]pkgID{}, npm: map[string]pkgID{}}
	d.dpkg, _ = readDpkgStatus(dpkgStatus) // a guest without dpkg has none
	return d
}

// observe returns the package events that the file event f implies.
func (d *detector) observe(f *agentv1.FileEvent) []*agentv1.PackageEvent {
	switch {
	case f.Path == d.dpkgStatus && f.Op != opDeleted:
		return d.observeDpkg()
	case f.Op == opRenamed:
		// A rename away is a removal of the old path, then the new path
		// is looked at as if created.
		out := d.observePath(opDeleted, f.OldPath, f.Dir)
		return append(out, d.observePath(opCreated, f.Path, f.Dir)...)
	}
	return d.observePath(f.Op, f.Path, f.Dir)
}

func (d *detector) observePath(op, p string, dir bool) []*agentv1.PackageEvent {
	if dir {
		if op == opDeleted && isDistInfoDir(p) {
			return d.pipRemoved(p)
		}
		return nil
	}
	switch {
	case path.Base(p) == "METADATA" && isDistInfoDir(path.Dir(p)):
		if op != opDeleted {
			return d.pipInstalled(p)
		}
	case isNpmManifest(p):
		return d.npmChanged(op, p)
	}
	return nil
}

// isDistInfoDir reports whether p is a wheel's metadata dir in site-packages.
func isDistInfoDir(p string) bool {
	parent := path.Base(path.Dir(p))
	return strings.HasSuffix(p, ".dist-info") && (parent == "site-packages" || parent == "dist-packages")
}

func (d *detector) pipInstalled(metadata string) []*agentv1.PackageEvent {
	dir := path.Dir(metadata)
	id, err := readPipMetadata(metadata)
	if err != nil || id.name == "" {
		id = distInfoName(dir)
	}
	if d.pip[dir] == id {
		return nil
	}
	d.pip[dir] = id
	return []*agentv1.PackageEvent{{Manager: managerPip, Action: actionInstalled, Name: id.name, Version: id.version, Path: metadata}}
}

func (d *detector) pipRemoved(dir string) []*agentv1.PackageEvent {
	id, ok := d.pip[dir]
	if !ok {
		id = distInfoName(dir)
	}
	delete(d.pip, dir)
	return []*agentv1.PackageEvent{{Manager: managerPip, Action: actionRemoved, Name: id.name, Version: id.version, Path: path.Join(dir, "METADATA")}}
}

// distInfoName parses "name-version.dist-info" (wheel names escape "-" in
// both parts, so the first "-" separates them).
func distInfoName(dir string) pkgID {
	base := strings.TrimSuffix(path.Base(dir), ".dist-info")
	name, version, _ := strings.Cut(base, "-")
	return pkgID{name, version}
}

func readPipMetadata(p string) (pkgID, error) {
	f, err := os.Open(p)
	if err != nil {
		return pkgID{}, err
	}
	defer f.Close()
	return parsePipMetadata(io.LimitReader(f, maxMetadataBytes))
}

// parsePipMetadata reads Name and Version from a core-metadata file (RFC 822
// style headers, ending at the first blank line).
func parsePipMetadata(r io.Reader) (pkgID, error) {
	var id pkgID
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			break
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "name":
			id.name = strings.TrimSpace(v)
		case "version":
			id.version = strings.TrimSpace(v)
		}
	}
	return id, sc.Err()
}

// isNpmManifest reports whether p is node_modules/<name>/package.json or
// node_modules/@scope/<name>/package.json.
func isNpmManifest(p string) bool {
	if path.Base(p) != "package.json" {
		return false
	}
	pkg := path.Dir(p)
	parent := path.Dir(pkg)
	if strings.HasPrefix(path.Base(pkg), "@") {
		return false
	}
	if path.Base(parent) == "node_modules" {
		return true
	}
	return strings.HasPrefix(path.Base(parent), "@") && path.Base(path.Dir(parent)) == "node_modules"
}

func (d *detector) npmChanged(op, p string) []*agentv1.PackageEvent {
	old, known := d.npm[p]
	if op == opDeleted {
		if !known {
			old = pkgID{name: npmNameFromPath(p)}
		}
		delete(d.npm, p)
		return []*agentv1.PackageEvent{{Manager: managerNpm, Action: actionRemoved, Name: old.name, Version: old.version, Path: p}}
	}
	id, err := readNpmManifest(p)
	if err != nil {
		return nil // half-written or not JSON; the next close will tell
	}
	if id.name == "" {
		id.name = npmNameFromPath(p)
	}
	d.npm[p] = id
	switch {
	case !known:
		return []*agentv1.PackageEvent{{Manager: managerNpm, Action: actionInstalled, Name: id.name, Version: id.version, Path: p}}
	case old.version != id.version:
		return []*agentv1.PackageEvent{{Manager: managerNpm, Action: actionUpgraded, Name: id.name, Version: id.version, OldVersion: old.version, Path: p}}
	}
	return nil
}

// npmNameFromPath is the package name a manifest's location implies.
func npmNameFromPath(p string) string {
	pkg := path.Dir(p)
	if scope := path.Base(path.Dir(pkg)); strings.HasPrefix(scope, "@") {
		return scope + "/" + path.Base(pkg)
	}
	return path.Base(pkg)
}

func readNpmManifest(p string) (pkgID, error) {
	f, err := os.Open(p)
	if err != nil {
		return pkgID{}, err
	}
	defer f.Close()
	return parseNpmManifest(io.LimitReader(f, maxMetadataBytes))
}

// parseNpmManifest reads name and version from a package.json.
func parseNpmManifest(r io.Reader) (pkgID, error) {
	var m struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return pkgID{}, err
	}
	return pkgID{m.Name, m.Version}, nil
}
