-- Process liveness (migration 0004). A gateway process holds the advisory lock
-- ({{lock_class}}, its id) on a dedicated connection while it lives (``liveness.py``).

-- name: live_processes
-- the ids whose lock is held in this database now
SELECT l.objid::bigint FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.classid = {{lock_class}} AND l.objsubid = 2
  AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())

-- name: next_process_id
SELECT nextval('gateway_process_ids')::integer

-- name: count_peers
-- the liveness check: the other live gateway processes (``gateway.outbox.pacing`` paces in
-- memory while there are none)
SELECT count(*)::integer FROM ({{live_processes}}) AS live (id) WHERE id <> $1

-- name: register_process
-- after taking the lock: this process locked in this server lifetime
INSERT INTO gateway_processes (id, server_started_at) VALUES ($1, pg_postmaster_start_time())
ON CONFLICT (id) DO UPDATE SET server_started_at = excluded.server_started_at, locked_at = now()

-- name: prune_processes
-- rows of dead processes from earlier server lifetimes (or older than a week) go; a live
-- process's row is never removed
DELETE FROM gateway_processes
WHERE (server_started_at <> pg_postmaster_start_time() OR locked_at < now() - interval '7 days')
  AND id NOT IN ({{live_processes}})

-- name: lock_process
SELECT pg_try_advisory_lock({{lock_class}}, $1)

-- name: relock_grace
-- a live owner never waits longer than this to re-lock after a database restart
-- (``dead_process`` in liveness.py)
interval '1.2 seconds'
