-- The migrator's own bookkeeping: which migration files are applied, under one lock.

-- name: lock
SELECT pg_advisory_lock($1)

-- name: unlock
SELECT pg_advisory_unlock($1)

-- name: create_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    filename   text PRIMARY KEY,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: applied
SELECT filename, checksum FROM schema_migrations

-- name: record
INSERT INTO schema_migrations (filename, checksum) VALUES ($1, $2)
