package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// templateImagesSchema is migration 6: the image a template was built from.
const templateImagesSchema = `CREATE TABLE template_images (
	name        TEXT PRIMARY KEY,
	snapshot_id TEXT NOT NULL,
	ref         TEXT NOT NULL,
	digest      TEXT NOT NULL,
	base        TEXT NOT NULL,
	config      TEXT NOT NULL DEFAULT '{}'
);`

// TemplateImage records the OCI image a template was built from: its
// reference, config digest, the qcow2 base made of it and the parts of its
// config that sandboxes honour (as JSON, images/imageconfig.Config).
type TemplateImage struct {
	Name       string
	SnapshotID string
	Ref        string
	Digest     string
	Base       string
	Config     json.RawMessage
}

// PutTemplateImage inserts or replaces a template's image record.
func (s *Store) PutTemplateImage(ctx context.Context, ti TemplateImage) error {
	if len(ti.Config) == 0 {
		ti.Config = json.RawMessage("{}")
	}
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO template_images (name, snapshot_id, ref, digest, base, config)
		VALUES (?, ?, ?, ?, ?, ?)`, ti.Name, ti.SnapshotID, ti.Ref, ti.Digest, ti.Base, string(ti.Config))
	return err
}

// GetTemplateImage returns the image record of template name while the
// template still names the snapshot that was built from it; otherwise an
// error wrapping ErrNotFound.
func (s *Store) GetTemplateImage(ctx context.Context, name string) (TemplateImage, error) {
	ti := TemplateImage{Name: name}
	var cfg string
	err := s.db.QueryRowContext(ctx, `SELECT i.snapshot_id, i.ref, i.digest, i.base, i.config FROM template_images i
		JOIN templates t ON t.name = i.name AND t.snapshot_id = i.snapshot_id WHERE i.name = ?`, name).
		Scan(&ti.SnapshotID, &ti.Ref, &ti.Digest, &ti.Base, &cfg)
	if errors.Is(err, sql.ErrNoRows) {
		return ti, fmt.Errorf("store: template image %s: %w", name, ErrNotFound)
	}
	ti.Config = json.RawMessage(cfg)
	return ti, err
}

// maxLineage bounds the snapshot chain TemplateImageOfSnapshot walks.
const maxLineage = 1024

// TemplateImageOfSnapshot returns the image record of snapshot id or of its
// nearest ancestor that has one (a template built on an image template
// runs that template's kernel), or an error wrapping ErrNotFound.
func (s *Store) TemplateImageOfSnapshot(ctx context.Context, id string) (TemplateImage, error) {
	var ti TemplateImage
	var cfg string
	err := s.db.QueryRowContext(ctx, `WITH RECURSIVE lineage(id, depth) AS (
			SELECT ?, 0
			UNION ALL SELECT s.parent_id, l.depth + 1 FROM snapshots s JOIN lineage l ON s.id = l.id
				WHERE s.parent_id != '' AND l.depth < ?)
		SELECT i.name, i.snapshot_id, i.ref, i.digest, i.base, i.config FROM template_images i
			JOIN lineage l ON i.snapshot_id = l.id ORDER BY l.depth LIMIT 1`, id, maxLineage).
		Scan(&ti.Name, &ti.SnapshotID, &ti.Ref, &ti.Digest, &ti.Base, &cfg)
	if errors.Is(err, sql.ErrNoRows) {
		return ti, fmt.Errorf("store: template image of snapshot %s: %w", id, ErrNotFound)
	}
	ti.Config = json.RawMessage(cfg)
	return ti, err
}
