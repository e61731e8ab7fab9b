package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// eventsSchema is migration 5: every sandbox's audit events in one table,
// ordered by id. Each row's data is the JSON of its type's payload. The
// network rows of migration 3 are copied over and their table dropped.
const eventsSchema = `CREATE TABLE events (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id TEXT NOT NULL,
		time       INTEGER NOT NULL,
		type       TEXT NOT NULL,
		trace_id   TEXT NOT NULL DEFAULT '',
		span_id    TEXT NOT NULL DEFAULT '',
		api_key    TEXT NOT NULL DEFAULT '',
		data       TEXT NOT NULL DEFAULT '{}'
	);
	CREATE INDEX events_sandbox ON events (sandbox_id, id);
	CREATE INDEX events_sandbox_time ON events (sandbox_id, time);
	INSERT INTO events (sandbox_id, time, type, data)
		SELECT sandbox_id, time, 'network', json_object('kind', kind, 'host', host, 'port', port,
			'method', method, 'path', path, 'bytes_out', bytes_out, 'bytes_in', bytes_in,
			'allowed', json(CASE allowed WHEN 0 THEN 'false' ELSE 'true' END), 'rule', rule, 'status', status)
		FROM network_events ORDER BY id;
	DROP TABLE network_events;`

// Event is one row of the flight recorder's log.
type Event struct {
	ID        int64
	SandboxID string
	Time      time.Time
	Type      string
	// TraceID and SpanID (hex) link it to the caller's trace, if any.
	TraceID, SpanID string
	// APIKey names the key whose request caused it, if any.
	APIKey string
	// Data is the JSON payload of its type.
	Data []byte
}

// EventQuery selects events of one sandbox, oldest first.
type EventQuery struct {
	SandboxID string
	// Types keeps only these types (none: all).
	Types []string
	// After keeps ids above it (paging).
	After int64
	// Since and Until bound the time, inclusive (zero: unbounded).
	Since, Until time.Time
	// Limit caps the rows (≤ 0: 1000).
	Limit int
}

// insertEvent is AddEvents' statement (Store.addEvent).
const insertEvent = `INSERT INTO events (sandbox_id, time, type, trace_id, span_id, api_key, data)
	VALUES (?, ?, ?, ?, ?, ?, ?)`

// AddEvents appends events in one transaction and sets their ids.
func (s *Store) AddEvents(ctx context.Context, evs []Event) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: add events: %w", err)
	}
	defer tx.Rollback()
	ins := tx.StmtContext(ctx, s.addEvent)
	for i := range evs {
		e := &evs[i]
		data := e.Data
		if len(data) == 0 {
			data = []byte("{}")
		}
		res, err := ins.ExecContext(ctx, e.SandboxID, e.Time.UnixNano(), e.Type, e.TraceID, e.SpanID, e.APIKey, string(data))
		if err != nil {
			return fmt.Errorf("store: add event: %w", err)
		}
		if e.ID, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("store: add event: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: add events: %w", err)
	}
	return nil
}

// ListEvents returns the events q selects, oldest first.
func (s *Store) ListEvents(ctx context.Context, q EventQuery) ([]Event, error) {
	where := []string{"sandbox_id = ?", "id > ?"}
	args := []any{q.SandboxID, q.After}
	if len(q.Types) > 0 {
		where = append(where, "type IN (?"+strings.Repeat(", ?", len(q.Types)-1)+")")
		for _, t := range q.Types {
			args = append(args, t)
		}
	}
	if !q.Since.IsZero() {
		where, args = append(where, "time >= ?"), append(args, q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		where, args = append(where, "time <= ?"), append(args, q.Until.UnixNano())
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 1000
	}
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, `SELECT id, sandbox_id, time, type, trace_id, span_id, api_key, data
		FROM events WHERE `+strings.Join(where, " AND ")+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var t int64
		var data string
		if err := rows.Scan(&e.ID, &e.SandboxID, &t, &e.Type, &e.TraceID, &e.SpanID, &e.APIKey, &data); err != nil {
			return nil, fmt.Errorf("store: list events: %w", err)
		}
		e.Time, e.Data = time.Unix(0, t).UTC(), []byte(data)
		out = append(out, e)
	}
	return out, rows.Err()
}

// HasEvents reports whether sandbox id has any event (its log outlives it).
func (s *Store) HasEvents(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM events WHERE sandbox_id = ? LIMIT 1)`, id).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: has events: %w", err)
	}
	return n > 0, nil
}

// DeleteEventsBefore removes the events older than t and returns how many.
func (s *Store) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE time < ?`, t.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("store: delete old events: %w", err)
	}
	return res.RowsAffected()
}
