package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

func TestArchivesAndWatch(t *testing.T) {
	c, m, _ := newTestClient(t)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "d/f.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("hi"))
	tw.Close()
	res, err := c.PutArchive(ctx, id, "/up", &buf)
	if err != nil || res.Entries != 1 || res.Bytes != 2 {
		t.Fatalf("put: %+v, %v", res, err)
	}
	var down bytes.Buffer
	if err := c.GetArchive(ctx, id, "/up", &down); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&down)
	var names []string
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		names = append(names, h.Name)
	}
	if len(names) != 2 || names[1] != "d/f.txt" {
		t.Errorf("archive names: %v", names)
	}

	buf.Reset()
	tw = tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	_, err = c.PutArchive(ctx, id, "/up", &buf)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_archive" {
		t.Errorf("hostile: %v", err)
	}

	m.SetWatch(sandbox.WatchEvent{Type: "create", Path: "/up/new", Size: 5, Time: time.Now()})
	wctx, cancel := context.WithCancel(ctx)
	var got []client.WatchEvent
	err = c.Watch(wctx, id, "/up", false, func(ev client.WatchEvent) error {
		got = append(got, ev)
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(got) != 1 || got[0].Type != client.WatchEventTypeCreate || got[0].Size != 5 {
		t.Errorf("watch: %+v, %v", got, err)
	}
}
