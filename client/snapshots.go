package client

import (
	"context"
	"net/http"
)

// Snapshot captures a running sandbox (memory, devices, disk).
func (c *Client) Snapshot(ctx context.Context, id string, req SnapshotRequest) (Snapshot, error) {
	var sn Snapshot
	err := decode(c.raw.SnapshotSandbox(ctx, id, req))(http.StatusCreated, &sn)
	return sn, err
}

// Fork starts count copy-on-write copies of a running sandbox.
func (c *Client) Fork(ctx context.Context, id string, count int) ([]Sandbox, error) {
	var list SandboxList
	err := decode(c.raw.ForkSandbox(ctx, id, ForkRequest{Count: count}))(http.StatusCreated, &list)
	return list.Sandboxes, err
}

// Pause writes a sandbox's memory to disk and ends its VM.
func (c *Client) Pause(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := decode(c.raw.PauseSandbox(ctx, id))(http.StatusOK, &sb)
	return sb, err
}

// Release makes a host forget a paused sandbox that is durable in the
// snapshot store (it moved): the host's files and records go, the store's
// refs stay. A sandbox that is not paused and durable is refused (409
// sandbox_not_durable).
func (c *Client) Release(ctx context.Context, id string) error {
	return decode(c.raw.ReleaseSandbox(ctx, id))(http.StatusNoContent, nil)
}

// Resume brings a paused sandbox back.
func (c *Client) Resume(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := decode(c.raw.ResumeSandbox(ctx, id))(http.StatusOK, &sb)
	return sb, err
}

// GetSnapshot describes a snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	var sn Snapshot
	err := decode(c.raw.GetSnapshot(ctx, id))(http.StatusOK, &sn)
	return sn, err
}

// ListSnapshots lists the snapshots, oldest first.
func (c *Client) ListSnapshots(ctx context.Context) ([]Snapshot, error) {
	var list SnapshotList
	err := decode(c.raw.ListSnapshots(ctx, nil))(http.StatusOK, &list)
	return list.Snapshots, err
}

// DeleteSnapshot deletes a snapshot that nothing uses.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return decode(c.raw.DeleteSnapshot(ctx, id))(http.StatusNoContent, nil)
}

// CreateTemplate names a snapshot as a template with a warm pool.
func (c *Client) CreateTemplate(ctx context.Context, req CreateTemplateRequest) (Template, error) {
	var t Template
	err := decode(c.raw.CreateTemplate(ctx, req))(http.StatusCreated, &t)
	return t, err
}

// GetTemplate describes a template.
func (c *Client) GetTemplate(ctx context.Context, name string) (Template, error) {
	var t Template
	err := decode(c.raw.GetTemplate(ctx, name))(http.StatusOK, &t)
	return t, err
}

// ListTemplates lists the templates.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var list TemplateList
	err := decode(c.raw.ListTemplates(ctx, nil))(http.StatusOK, &list)
	return list.Templates, err
}

// DeleteTemplate deletes a template and its warm pool.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return decode(c.raw.DeleteTemplate(ctx, name))(http.StatusNoContent, nil)
}
