package watch

import (
	"bufio"
	"io"
	"os"
	"sort"
	"strings"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// dpkgEntry is one stanza of dpkg's status file.
type dpkgEntry struct {
	version string
	state   string // the third word of Status:, e.g. installed, unpacked
}

// installed reports whether dpkg counts the package as configured.
func (e dpkgEntry) installed() bool {
	switch e.state {
	case "installed", "triggers-pending", "triggers-awaited":
		return true
	}
	return false
}

// transitional reports whether dpkg is in the middle of changing it
// (unpacking an upgrade, configuring): not yet installed, not removed.
func (e dpkgEntry) transitional() bool {
	switch e.state {
	case "half-installed", "unpacked", "half-configured":
		return true
	}
	return false
}

// parseDpkgStatus reads the stanzas of a dpkg status file: package name →
// entry. Continuation lines (starting with a blank) are skipped.
func parseDpkgStatus(r io.Reader) (map[string]dpkgEntry, error) {
	out := map[string]dpkgEntry{}
	var name string
	var cur dpkgEntry
	flush := func() {
		if name != "" {
			out[name] = cur
		}
		name, cur = "", dpkgEntry{}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Package":
			name = v
		case "Version":
			cur.version = v
		case "Status":
			if f := strings.Fields(v); len(f) == 3 {
				cur.state = f[2]
			}
		}
	}
	flush()
	return out, sc.Err()
}

// readDpkgStatus parses the status file at p into installed package →
// version.
func readDpkgStatus(p string) (map[string]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := parseDpkgStatus(f)
	if err != nil {
		return nil, err
	}
	return installedVersions(entries, nil), nil
}

// installedVersions is the installed package → version of a parse. A
// package dpkg is still working on keeps the version it had in prev, so an
// upgrade in progress is neither a removal nor an install.
func installedVersions(entries map[string]dpkgEntry, prev map[string]string) map[string]string {
	out := map[string]string{}
	for name, e := range entries {
		switch {
		case e.installed():
			out[name] = e.version
		case e.transitional():
			if v, ok := prev[name]; ok {
				out[name] = v
			}
		}
	}
	return out
}

// diffDpkg returns the package events that turn old into new, by name.
func diffDpkg(old, new map[string]string, statusPath string) []*agentv1.PackageEvent {
	var out []*agentv1.PackageEvent
	for name, v := range new {
		ov, ok := old[name]
		switch {
		case !ok:
			out = append(out, &agentv1.PackageEvent{Action: actionInstalled, Name: name, Version: v})
		case ov != v:
			out = append(out, &agentv1.PackageEvent{Action: actionUpgraded, Name: name, Version: v, OldVersion: ov})
		}
	}
	for name, v := range old {
		if _, ok := new[name]; !ok {
			out = append(out, &agentv1.PackageEvent{Action: actionRemoved, Name: name, Version: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, e := range out {
		e.Manager, e.Path = managerDpkg, statusPath
	}
	return out
}

// observeDpkg re-reads the status file and reports what changed since the
// last read.
func (d *detector) observeDpkg() []*agentv1.PackageEvent {
	f, err := os.Open(d.dpkgStatus)
	if err != nil {
		return nil
	}
	defer f.Close()
	entries, err := parseDpkgStatus(f)
	if err != nil {
		return nil
	}
	cur := installedVersions(entries, d.dpkg)
	out := diffDpkg(d.dpkg, cur, d.dpkgStatus)
	d.dpkg = cur
	return out
}
