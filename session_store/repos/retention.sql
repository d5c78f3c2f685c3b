-- Retention: what each kind of stored data has past its window, and dropping it in bounded
-- batches (gateway/retention). Every batch is its own short transaction.

-- name: ensure_partitions
SELECT inbound_ensure_partitions(now(), $1)

-- name: lock_maintenance
-- one replica at a time creates and drops the inbox's partitions
SELECT pg_try_advisory_xact_lock(hashtext('inbound_events_maintenance'))

-- name: inbox_partitions
-- the inbox's month partitions and the one made of the old table, with the first day after
-- the range each holds and its estimated row count
SELECT c.relname AS name,
       CASE WHEN c.relname LIKE 'inbound\_events\_before\_%'
            THEN to_date(substr(c.relname, 23), 'YYYY_MM')
            ELSE (to_date(substr(c.relname, 16), 'YYYY_MM') + interval '1 month')::date
       END AS ends,
       greatest(c.reltuples, 0)::bigint AS rows
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = 'inbound_events'::regclass
  AND c.relname ~ '^inbound_events_(before_)?[0-9][0-9][0-9][0-9]_[0-9][0-9]$'
ORDER BY ends

-- name: id_span
SELECT min(id) AS first, max(id) AS last FROM inbound_events

-- name: drop_payloads
-- accepted events with ids in [$1, $2) received before $3 lose their raw payload (the row
-- and its dedupe keys stay); with the oldest and newest receipt in the span
WITH done AS (
    UPDATE inbound_events SET payload = NULL
    WHERE id >= $1 AND id < $2 AND received_at < $3
      AND status = 'accepted' AND payload IS NOT NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM done) AS dropped,
       (SELECT max(received_at) FROM inbound_events WHERE id >= $1 AND id < $2) AS newest

-- name: count_payloads
SELECT count(*) FROM inbound_events
WHERE received_at < $1 AND status = 'accepted' AND payload IS NOT NULL

-- name: delete_dead_letters
WITH doomed AS (
    SELECT id, received_at FROM inbound_events
    WHERE status <> 'accepted' AND received_at < $1
    ORDER BY status, id
    LIMIT $2
), gone AS (
    DELETE FROM inbound_events AS e USING doomed
    WHERE e.id = doomed.id AND e.received_at = doomed.received_at
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: count_dead_letters
SELECT count(*) FROM inbound_events WHERE status <> 'accepted' AND received_at < $1

-- name: delete_keys
WITH gone AS (
    DELETE FROM inbound_keys
    WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM inbound_keys WHERE received_at < $1 ORDER BY received_at LIMIT $2
    ))
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: count_keys
SELECT count(*) FROM inbound_keys WHERE received_at < $1

-- name: delete_usage
WITH gone AS (
    DELETE FROM usage_ledger
    WHERE id = ANY (ARRAY(SELECT id FROM usage_ledger WHERE at < $1 ORDER BY at LIMIT $2))
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: count_usage
SELECT count(*) FROM usage_ledger WHERE at < $1

-- name: closed_sessions
-- closed sessions whose last activity is before $1, oldest first
SELECT id FROM sessions
WHERE status = 'closed' AND coalesce(last_message_at, updated_at) < $1
ORDER BY coalesce(last_message_at, updated_at), id
LIMIT $2

-- name: count_closed_sessions
SELECT count(*) FROM sessions
WHERE status = 'closed' AND coalesce(last_message_at, updated_at) < $1

-- name: session_record
-- still closed and past $2 (checked again under the row lock before the export)
SELECT to_jsonb(s) AS session FROM sessions AS s
WHERE id = $1 AND status = 'closed' AND coalesce(last_message_at, updated_at) < $2
FOR UPDATE

-- name: session_messages
SELECT to_jsonb(m) - 'content_tsv' AS message,
       coalesce((SELECT jsonb_agg(to_jsonb(a) ORDER BY a.id) FROM message_annotations AS a
                 WHERE a.message_id = m.id), '[]'::jsonb) AS annotations
FROM messages AS m WHERE m.session_id = $1 ORDER BY m.seq_no

-- name: session_references
-- every foreign key onto sessions or messages but messages' own (the rows a session's
-- deletion must remove first, or unlink when the column may be NULL)
SELECT c.conrelid::regclass::text AS tbl, a.attname AS col,
       c.confrelid::regclass::text AS target, NOT a.attnotnull AS nullable
FROM pg_constraint AS c
JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
WHERE c.contype = 'f' AND c.confrelid IN ('sessions'::regclass, 'messages'::regclass)
  AND NOT (c.conrelid = 'messages'::regclass AND c.confrelid = 'sessions'::regclass)
ORDER BY c.confrelid = 'sessions'::regclass, 1, 2

-- name: delete_session_inbox
-- the raw payloads the session's messages came in with (their dedupe keys stay)
DELETE FROM inbound_events
WHERE id IN (SELECT inbound_event_id FROM messages
             WHERE session_id = $1 AND inbound_event_id IS NOT NULL)

-- name: delete_session_messages
DELETE FROM messages WHERE session_id = $1

-- name: delete_session
DELETE FROM sessions WHERE id = $1
