-- Chunk reference counts (issue 40): every chunk of the snapshot store
-- that a manifest references has a row with how many manifests do, and
-- each manifest lists its digests. A chunk whose count fell to zero more
-- than a grace period ago is collected (CollectChunks): its object is
-- deleted under its row's lock, then the row.

-- +goose Up
CREATE TABLE chunks (
    digest     text PRIMARY KEY CHECK (digest ~ '^[0-9a-f]{64}$'),
    refs       integer NOT NULL DEFAULT 0 CHECK (refs >= 0),
    idle_since timestamptz NOT NULL DEFAULT now() -- when refs last became 0
);
CREATE INDEX chunks_unreferenced ON chunks (idle_since) WHERE refs = 0;

CREATE TABLE chunk_refs (
    manifest text NOT NULL,
    digest   text NOT NULL,
    PRIMARY KEY (manifest, digest)
);

-- +goose Down
DROP TABLE chunk_refs;
DROP TABLE chunks;
