-- The fleet's state (DESIGN R17): hosts with their leases and capacity,
-- where every sandbox, snapshot and template lives, and the tenancy model
-- (projects, hashed API keys, sealed secrets).

-- +goose Up
CREATE TABLE hosts (
	name           text PRIMARY KEY,
	addr           text NOT NULL,
	token_hash     text NOT NULL,
	epoch          bigint NOT NULL DEFAULT 1,
	state          text NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'dead', 'refused')),
	admin          text NOT NULL DEFAULT 'active' CHECK (admin IN ('active', 'cordoned', 'draining')),
	reason         text NOT NULL DEFAULT '',
	lease_until    timestamptz NOT NULL,
	heartbeat_at   timestamptz NOT NULL DEFAULT now(),
	registered_at  timestamptz NOT NULL DEFAULT now(),
	mem_mib        bigint NOT NULL DEFAULT 0,
	vcpus          bigint NOT NULL DEFAULT 0,
	max_sandboxes  integer NOT NULL DEFAULT 0,
	used_mem_mib   bigint NOT NULL DEFAULT 0,
	used_vcpus     bigint NOT NULL DEFAULT 0,
	used_sandboxes integer NOT NULL DEFAULT 0,
	running        integer NOT NULL DEFAULT 0,
	templates      text[] NOT NULL DEFAULT '{}',
	warm           text[] NOT NULL DEFAULT '{}'
);

CREATE TABLE projects (
	name           text PRIMARY KEY,
	created_at     timestamptz NOT NULL DEFAULT now(),
	max_sandboxes  integer NOT NULL DEFAULT 0,
	max_memory_mib bigint NOT NULL DEFAULT 0,
	max_vcpus      bigint NOT NULL DEFAULT 0
);
INSERT INTO projects (name) VALUES ('default');

CREATE TABLE sandboxes (
	id          text PRIMARY KEY,
	project     text NOT NULL REFERENCES projects (name),
	host        text NOT NULL REFERENCES hosts (name),
	host_epoch  bigint NOT NULL,
	generation  bigint NOT NULL DEFAULT 1,
	state       text NOT NULL CHECK (state IN ('placing', 'running', 'paused', 'lost')),
	reason      text NOT NULL DEFAULT '',
	template    text NOT NULL DEFAULT '',
	parent      text NOT NULL DEFAULT '',
	memory_mib  bigint NOT NULL,
	vcpus       bigint NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now(),
	updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandboxes_host ON sandboxes (host);
CREATE INDEX sandboxes_project ON sandboxes (project);

CREATE TABLE snapshots (
	id         text PRIMARY KEY,
	project    text NOT NULL REFERENCES projects (name),
	host       text NOT NULL REFERENCES hosts (name),
	sandbox    text NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE templates (
	name       text PRIMARY KEY,
	project    text NOT NULL REFERENCES projects (name),
	host       text NOT NULL REFERENCES hosts (name),
	created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
	id           text PRIMARY KEY,
	name         text NOT NULL,
	prefix       text NOT NULL,
	project      text NOT NULL REFERENCES projects (name),
	role         text NOT NULL CHECK (role IN ('admin', 'member')),
	hash         text NOT NULL UNIQUE,
	bootstrap    boolean NOT NULL DEFAULT false,
	created_at   timestamptz NOT NULL DEFAULT now(),
	expires_at   timestamptz,
	revoked_at   timestamptz,
	last_used_at timestamptz
);

CREATE TABLE secrets (
	name       text PRIMARY KEY,
	project    text NOT NULL REFERENCES projects (name),
	sealed     bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE secrets;
DROP TABLE api_keys;
DROP TABLE templates;
DROP TABLE snapshots;
DROP TABLE sandboxes;
DROP TABLE projects;
DROP TABLE hosts;
