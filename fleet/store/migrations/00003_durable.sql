-- Durable pauses (issue 40): the manifest of a sandbox's last snapshot
-- that is durable in object storage, and when it became so. A sandbox
-- whose host dies comes back from it (lease expiry marks the sandbox
-- paused instead of lost) and resumes on any host. moving_until marks a
-- sandbox that a migrate is moving between hosts: calls on it are
-- answered "retry" until then.

-- +goose Up
ALTER TABLE sandboxes ADD COLUMN durable_manifest text NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN durable_at timestamptz;
ALTER TABLE sandboxes ADD COLUMN moving_until timestamptz;

-- +goose Down
ALTER TABLE sandboxes DROP COLUMN moving_until;
ALTER TABLE sandboxes DROP COLUMN durable_at;
ALTER TABLE sandboxes DROP COLUMN durable_manifest;
