package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

func TestEventsFilterAndPage(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var evs []Event
	for i, typ := range []string{"lifecycle", "exec", "file", "exec", "network"} {
		evs = append(evs, Event{SandboxID: "a", Time: t0.Add(time.Duration(i) * time.Second), Type: typ, TraceID: "t", Data: []byte(`{"n":1}`)})
	}
	evs = append(evs, Event{SandboxID: "b", Time: t0, Type: "exec"})
	if err := s.AddEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if evs[0].ID == 0 || evs[1].ID <= evs[0].ID {
		t.Fatalf("ids not set in order: %d, %d", evs[0].ID, evs[1].ID)
	}
	cases := []struct {
		name string
		q    EventQuery
		want []string
	}{
		{"all", EventQuery{SandboxID: "a"}, []string{"lifecycle", "exec", "file", "exec", "network"}},
		{"types", EventQuery{SandboxID: "a", Types: []string{"exec", "network"}}, []string{"exec", "exec", "network"}},
		{"since until", EventQuery{SandboxID: "a", Since: t0.Add(time.Second), Until: t0.Add(3 * time.Second)}, []string{"exec", "file", "exec"}},
		{"page", EventQuery{SandboxID: "a", After: evs[1].ID, Limit: 2}, []string{"file", "exec"}},
		{"other sandbox", EventQuery{SandboxID: "b"}, []string{"exec"}},
	}
	for _, tc := range cases {
		got, err := s.ListEvents(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range got {
			types = append(types, e.Type)
		}
		if len(types) != len(tc.want) || (len(types) > 0 && types[0] != tc.want[0]) || types[len(types)-1] != tc.want[len(tc.want)-1] {
			t.Errorf("%s: got %v, want %v", tc.name, types, tc.want)
		}
	}
	if n, err := s.DeleteEventsBefore(ctx, t0.Add(time.Second)); n != 2 || err != nil {
		t.Errorf("DeleteEventsBefore: %d, %v, want 2 (a's first, b's)", n, err)
	}
	if ok, err := s.HasEvents(ctx, "a"); !ok || err != nil {
		t.Errorf("HasEvents(a) = %v, %v", ok, err)
	}
	if ok, err := s.HasEvents(ctx, "zz"); ok || err != nil {
		t.Errorf("HasEvents(zz) = %v, %v", ok, err)
	}
}

// TestNetworkEventsMigrate checks that migration 5 carries the network audit
// rows of a version-4 database into the event log.
func TestNetworkEventsMigrate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append([]string{`CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (4)`}, migrations[:4]...) {
		if _, err := db.ExecContext(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO network_events (sandbox_id, time, kind, host, port, bytes_out, allowed, rule)
		VALUES ('a', 5, 'https', 'example.test', 443, 12, 1, 'domain:example.test')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.ListEvents(ctx, EventQuery{SandboxID: "a"})
	if err != nil || len(got) != 1 {
		t.Fatalf("events after migration: %v, %v", got, err)
	}
	var d struct {
		Host     string `json:"host"`
		Port     int    `json:"port"`
		BytesOut int64  `json:"bytes_out"`
		Allowed  bool   `json:"allowed"`
	}
	if err := json.Unmarshal(got[0].Data, &d); err != nil || got[0].Type != "network" || d.Host != "example.test" || d.Port != 443 || d.BytesOut != 12 || !d.Allowed {
		t.Errorf("migrated event: %+v %s (%v)", got[0], got[0].Data, err)
	}
}
