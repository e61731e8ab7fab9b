package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

func asAPIError(err error, ae **client.APIError) bool { return errors.As(err, ae) }

// Inputs and outputs of the tools; the SDK derives their JSON schemas, the
// jsonschema tags are the descriptions an agent reads.

type sandboxRef struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (from create_sandbox or list_sandboxes)"`
}

type createIn struct {
	Template     string            `json:"template,omitempty" jsonschema:"start from this template (a named, pre-warmed snapshot); empty: the base image"`
	Snapshot     string            `json:"snapshot,omitempty" jsonschema:"start from this snapshot id (from snapshot_sandbox) instead"`
	AllowDomains []string          `json:"allow_domains,omitempty" jsonschema:"domain names the sandbox may reach (e.g. pypi.org or *.github.com); the default is no outbound network"`
	NoNetwork    bool              `json:"no_network,omitempty" jsonschema:"give the sandbox no network interface at all"`
	MemoryMiB    int               `json:"memory_mib,omitempty" jsonschema:"guest memory in MiB (0: hostd's default)"`
	VCPUs        int               `json:"vcpus,omitempty" jsonschema:"virtual CPUs (0: hostd's default)"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command in the sandbox"`
	Keep         bool              `json:"keep,omitempty" jsonschema:"keep the sandbox after this MCP session ends (by default it is deleted then)"`
}

type sandboxOut struct {
	SandboxID string `json:"sandbox_id"`
	State     string `json:"state"`
	Keep      bool   `json:"keep" jsonschema:"whether it outlives this MCP session"`
}

func (s *session) createSandbox(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, sandboxOut, error) {
	req := client.CreateSandboxRequest{Template: in.Template, Snapshot: in.Snapshot, MemoryMiB: in.MemoryMiB, VCPUs: in.VCPUs, Env: in.Env}
	if len(in.AllowDomains) > 0 || in.NoNetwork {
		req.Network = &client.NetworkPolicyInput{AllowDomains: in.AllowDomains}
		if in.NoNetwork {
			mode := client.NetworkMode("none")
			req.Network.Mode = &mode
		}
	}
	sb, err := s.c.CreateSandbox(ctx, req)
	if err != nil {
		return nil, sandboxOut{}, err
	}
	s.own(sb.ID, in.Keep)
	return nil, sandboxOut{SandboxID: sb.ID, State: string(sb.State), Keep: in.Keep}, nil
}

type readFileIn struct {
	sandboxRef
	Path string `json:"path" jsonschema:"absolute path of the file in the sandbox"`
}

type readFileOut struct {
	Content   string `json:"content" jsonschema:"the file's text (invalid UTF-8 bytes become U+FFFD)"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated" jsonschema:"true if the file is larger than the 1 MiB this tool returns"`
}

// maxReadFile caps what read_file returns.
const maxReadFile = 1 << 20

func (s *session) readFile(ctx context.Context, _ *mcp.CallToolRequest, in readFileIn) (*mcp.CallToolResult, readFileOut, error) {
	w := &capWriter{max: maxReadFile}
	if err := s.c.ReadFile(ctx, in.SandboxID, in.Path, w); err != nil && !errors.Is(err, errCapped) {
		return nil, readFileOut{}, err
	}
	return nil, readFileOut{Content: strings.ToValidUTF8(w.b.String(), "\uFFFD"), Size: w.n, Truncated: w.n > maxReadFile}, nil
}

type writeFileIn struct {
	sandboxRef
	Path    string `json:"path" jsonschema:"absolute path of the file in the sandbox; missing parent directories are created"`
	Content string `json:"content" jsonschema:"the file's new content (text), replacing any old content"`
	Mode    string `json:"mode,omitempty" jsonschema:"permission bits in octal, e.g. 0755 for a script (default 0644)"`
}

type writeFileOut struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func (s *session) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeFileIn) (*mcp.CallToolResult, writeFileOut, error) {
	mode, err := parseMode(in.Mode)
	if err != nil {
		return nil, writeFileOut{}, err
	}
	if err := s.c.WriteFile(ctx, in.SandboxID, in.Path, mode, strings.NewReader(in.Content)); err != nil {
		return nil, writeFileOut{}, err
	}
	return nil, writeFileOut{Path: in.Path, Bytes: len(in.Content)}, nil
}

type listFilesIn struct {
	sandboxRef
	Path string `json:"path" jsonschema:"absolute path of a directory in the sandbox"`
}

type fileEntry struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	IsDir bool   `json:"is_dir"`
	Mode  string `json:"mode" jsonschema:"permission bits in octal"`
}

type listFilesOut struct {
	Entries []fileEntry `json:"entries"`
}

func (s *session) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in listFilesIn) (*mcp.CallToolResult, listFilesOut, error) {
	ents, err := s.c.ListDir(ctx, in.SandboxID, in.Path)
	if err != nil {
		return nil, listFilesOut{}, err
	}
	out := listFilesOut{Entries: make([]fileEntry, 0, len(ents))}
	for _, e := range ents {
		out.Entries = append(out.Entries, fileEntry{Name: e.Name, Path: e.Path, Size: e.Size, IsDir: e.IsDir, Mode: fmt.Sprintf("%04o", e.Mode)})
	}
	return nil, out, nil
}

type snapshotOut struct {
	SnapshotID string `json:"snapshot_id" jsonschema:"pass it to create_sandbox's snapshot to start new sandboxes from this state"`
}

func (s *session) snapshotSandbox(ctx context.Context, _ *mcp.CallToolRequest, in sandboxRef) (*mcp.CallToolResult, snapshotOut, error) {
	snap, err := s.c.Snapshot(ctx, in.SandboxID, client.SnapshotRequest{})
	if err != nil {
		return nil, snapshotOut{}, err
	}
	return nil, snapshotOut{SnapshotID: snap.ID}, nil
}

type forkIn struct {
	sandboxRef
	Count int  `json:"count,omitempty" jsonschema:"how many copies (default 1)"`
	Keep  bool `json:"keep,omitempty" jsonschema:"keep the copies after this MCP session ends (by default they are deleted then)"`
}

type forkOut struct {
	SandboxIDs []string `json:"sandbox_ids" jsonschema:"the new sandboxes: each a running copy of the original, files and processes"`
}

func (s *session) forkSandbox(ctx context.Context, _ *mcp.CallToolRequest, in forkIn) (*mcp.CallToolResult, forkOut, error) {
	n := max(in.Count, 1)
	sbs, err := s.c.Fork(ctx, in.SandboxID, n)
	if err != nil {
		return nil, forkOut{}, err
	}
	out := forkOut{SandboxIDs: []string{}}
	for _, sb := range sbs {
		s.own(sb.ID, in.Keep)
		out.SandboxIDs = append(out.SandboxIDs, sb.ID)
	}
	return nil, out, nil
}

type urlIn struct {
	sandboxRef
	Port int `json:"port" jsonschema:"TCP port a server listens on inside the sandbox"`
}

type urlOut struct {
	URL     string `json:"url,omitempty" jsonschema:"the port's own host name URL, when hostd has a service domain"`
	PathURL string `json:"path_url" jsonschema:"a URL through hostd's API address"`
	Token   string `json:"token" jsonschema:"the sandbox's access token: send it as the Authorization bearer or the agentbox_token query parameter"`
}

func (s *session) getServiceURL(ctx context.Context, _ *mcp.CallToolRequest, in urlIn) (*mcp.CallToolResult, urlOut, error) {
	pa, err := s.c.PortAccess(ctx, in.SandboxID, in.Port)
	if err != nil {
		return nil, urlOut{}, err
	}
	return nil, urlOut{URL: pa.URL, PathURL: pa.PathURL, Token: pa.Token}, nil
}

type listOut struct {
	Sandboxes []listedSandbox `json:"sandboxes"`
}

type listedSandbox struct {
	SandboxID string `json:"sandbox_id"`
	State     string `json:"state"`
	CreatedAt string `json:"created_at"`
	Session   bool   `json:"created_by_this_session"`
	Keep      bool   `json:"keep" jsonschema:"created by this session and kept after it"`
}

func (s *session) listSandboxes(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, listOut, error) {
	sbs, err := s.c.ListSandboxes(ctx)
	if err != nil {
		return nil, listOut{}, err
	}
	out := listOut{Sandboxes: []listedSandbox{}}
	for _, sb := range sbs {
		owned, keep := s.ownership(sb.ID)
		out.Sandboxes = append(out.Sandboxes, listedSandbox{SandboxID: sb.ID, State: string(sb.State),
			CreatedAt: sb.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), Session: owned, Keep: keep})
	}
	return nil, out, nil
}

type deleteOut struct {
	Deleted string `json:"deleted"`
}

func (s *session) deleteSandbox(ctx context.Context, _ *mcp.CallToolRequest, in sandboxRef) (*mcp.CallToolResult, deleteOut, error) {
	if err := s.c.DeleteSandbox(ctx, in.SandboxID); err != nil {
		return nil, deleteOut{}, err
	}
	s.disown(in.SandboxID)
	return nil, deleteOut{Deleted: in.SandboxID}, nil
}

func (s *session) addTools(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{Name: "create_sandbox", Description: "Create a sandbox: a fresh Linux microVM (Debian, python3, pip, git, curl) " +
		"that is yours alone. Returns its sandbox_id, which every other tool takes. Outbound network is denied unless you list " +
		"allow_domains. It is deleted when this MCP session ends unless keep is true."}, s.createSandbox)
	mcp.AddTool(srv, &mcp.Tool{Name: "run_command", Description: "Run a shell command (/bin/sh -c) in a sandbox and wait for it, up to timeout_s " +
		"(default 60). Returns exit_code, stdout and stderr. Output beyond 64 KiB per call is cut: the text then ends with a " +
		"'[output truncated …]' marker and the result has truncated=true and next_offset; a command still running at the timeout " +
		"has running=true. In both cases call read_output with the exec_id and next_offset to read on (the command keeps running)."}, s.runCommand)
	mcp.AddTool(srv, &mcp.Tool{Name: "read_output", Description: "Read more output of a command started by run_command, from byte offset " +
		"(its next_offset), waiting up to timeout_s (default 60) for the command to finish. Same result as run_command."}, s.readOutput)
	mcp.AddTool(srv, &mcp.Tool{Name: "read_file", Description: "Read a text file from a sandbox (up to 1 MiB; truncated=true beyond)."}, s.readFile)
	mcp.AddTool(srv, &mcp.Tool{Name: "write_file", Description: "Write a text file in a sandbox, replacing it atomically; parent directories are created."}, s.writeFile)
	mcp.AddTool(srv, &mcp.Tool{Name: "list_files", Description: "List a directory in a sandbox: name, path, size, is_dir, mode of each entry."}, s.listFiles)
	mcp.AddTool(srv, &mcp.Tool{Name: "snapshot_sandbox", Description: "Save a running sandbox's whole state (memory, processes, files) as a snapshot; " +
		"create_sandbox with that snapshot id starts new sandboxes from it. The sandbox keeps running."}, s.snapshotSandbox)
	mcp.AddTool(srv, &mcp.Tool{Name: "fork_sandbox", Description: "Copy a running sandbox into count new running sandboxes (processes and files included), " +
		"e.g. to try alternatives in parallel. The copies are deleted at session end unless keep is true."}, s.forkSandbox)
	mcp.AddTool(srv, &mcp.Tool{Name: "get_service_url", Description: "Get a URL that reaches a TCP port a server listens on inside a sandbox, " +
		"and the token it needs."}, s.getServiceURL)
	mcp.AddTool(srv, &mcp.Tool{Name: "list_sandboxes", Description: "List the sandboxes on this hostd, marking those this session created."}, s.listSandboxes)
	mcp.AddTool(srv, &mcp.Tool{Name: "delete_sandbox", Description: "Delete a sandbox: its VM stops and everything in it is gone."}, s.deleteSandbox)
	mcp.AddTool(srv, &mcp.Tool{Name: "compare_sandboxes", Description: "Compare two sandboxes or snapshots (e.g. a fork and its parent): " +
		"the files added, removed, modified or renamed since their common snapshot, with unified diffs of text files; with events, " +
		"also the commands (with exit codes), file writes, packages and network calls of each since the fork."}, s.compareSandboxes)
}
