-- The audit log (append-only, partitioned by month of `at`).

-- name: event_columns
id, at, actor, action, object_type, object_id, outcome, reason, remote_addr, surface, details

-- name: insert
INSERT INTO audit_events
    (actor, action, object_type, object_id, outcome, reason, remote_addr, surface, details)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::jsonb)
RETURNING {{event_columns}}

-- name: page
-- newest first; $5/$6: the (at, id) of the last row of the previous page, or NULL
SELECT {{event_columns}} FROM audit_events
WHERE ($1::timestamptz IS NULL OR at >= $1)
  AND ($2::timestamptz IS NULL OR at < $2)
  AND ($3::text IS NULL OR actor = $3)
  AND ($4::text IS NULL OR action = $4 OR starts_with(action, $4 || '.'))
  AND ($5::timestamptz IS NULL OR (at, id) < ($5, $6::bigint))
ORDER BY at DESC, id DESC
LIMIT $7

-- name: ensure_partitions
SELECT audit_ensure_partitions(now(), $1)

-- name: lock_maintenance
-- one replica at a time creates and drops partitions
SELECT pg_try_advisory_xact_lock(hashtext('audit_events_maintenance'))

-- name: expired_partitions
-- month partitions wholly before $1
SELECT c.relname AS name
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = 'audit_events'::regclass
  AND c.relname ~ '^audit_events_[0-9][0-9][0-9][0-9]_[0-9][0-9]$'
  AND (to_date(substr(c.relname, 14), 'YYYY_MM') + interval '1 month')
      <= ($1::timestamptz AT TIME ZONE 'UTC')
ORDER BY c.relname
