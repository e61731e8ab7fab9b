package mcp

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

type compareIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the new side: a sandbox id (sb-…) or a snapshot id (sn-…), e.g. a fork"`
	Against   string `json:"against" jsonschema:"the old side: a sandbox or snapshot id, e.g. the sandbox it was forked from"`
	Path      string `json:"path,omitempty" jsonschema:"only compare under this absolute path (default the whole filesystem without /proc /sys /dev /run /tmp)"`
	Events    bool   `json:"events,omitempty" jsonschema:"also compare what happened: commands with exit codes, file writes, packages, network calls since the fork"`
}

type compareEntry struct {
	Path    string   `json:"path"`
	OldPath string   `json:"old_path,omitempty"`
	Status  string   `json:"status" jsonschema:"added, removed, modified or renamed"`
	Kind    string   `json:"kind"`
	Changes []string `json:"changes,omitempty" jsonschema:"content, mode, owner, type, target"`
	Patch   string   `json:"patch,omitempty"`
	Note    string   `json:"note,omitempty" jsonschema:"why there is no patch (binary, too_large)"`
}

type compareEvent struct {
	Side string `json:"side" jsonschema:"common, new or old"`
	What string `json:"what"`
}

type compareOut struct {
	Method  string         `json:"method" jsonschema:"journal, walk or full: how the changed paths were found"`
	Reason  string         `json:"reason"`
	Base    string         `json:"base_snapshot,omitempty"`
	Entries []compareEntry `json:"entries"`
	Events  []compareEvent `json:"events,omitempty"`
	// Truncated says entries were cut at maxCompareEntries.
	Truncated bool `json:"truncated,omitempty"`
}

// maxCompareEntries bounds what one tool answer carries to the model.
const maxCompareEntries = 500

func (s *session) compareSandboxes(ctx context.Context, _ *mcp.CallToolRequest, in compareIn) (*mcp.CallToolResult, compareOut, error) {
	d, err := s.c.Diff(ctx, in.SandboxID, in.Against, client.DiffOptions{Path: in.Path, Patch: true, Events: in.Events, Limit: maxCompareEntries})
	if err != nil {
		return nil, compareOut{}, err
	}
	out := compareOut{Method: string(d.Method), Reason: d.Reason, Base: d.BaseSnapshot, Entries: []compareEntry{}, Truncated: d.NextCursor != ""}
	for _, e := range d.Entries {
		ce := compareEntry{Path: e.Path, OldPath: e.OldPath, Status: string(e.Status), Kind: string(e.Kind), Patch: e.Patch}
		if e.PatchOmitted != "" && e.PatchOmitted != client.DiffEntryPatchOmittedNotAsked {
			ce.Note = string(e.PatchOmitted)
		}
		for _, c := range e.Changes {
			ce.Changes = append(ce.Changes, string(c))
		}
		out.Entries = append(out.Entries, ce)
	}
	if ev := d.Events; ev != nil {
		for _, side := range []struct {
			name string
			evs  []client.AuditEvent
		}{{"common", ev.Common}, {"new", ev.New}, {"old", ev.Old}} {
			for _, e := range side.evs {
				out.Events = append(out.Events, compareEvent{Side: side.name, What: eventWhat(e)})
			}
		}
	}
	return nil, out, nil
}

// eventWhat is an event in a few words.
func eventWhat(e client.AuditEvent) string {
	switch {
	case e.Exec != nil:
		code := "?"
		if e.Exec.ExitCode != nil {
			code = fmt.Sprint(*e.Exec.ExitCode)
		}
		argv := []string{}
		if e.Exec.Argv != nil {
			argv = *e.Exec.Argv
		}
		return fmt.Sprintf("exec %q exit %s", argv, code)
	case e.File != nil:
		return fmt.Sprintf("file %s %s", e.File.Op, e.File.Path)
	case e.Package != nil:
		return fmt.Sprintf("package %s %s %s", e.Package.Action, e.Package.Name, e.Package.Version)
	case e.Network != nil:
		return fmt.Sprintf("network %s %s", e.Network.Kind, e.Network.Host)
	}
	return string(e.Type)
}
