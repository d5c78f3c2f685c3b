-- Leader election: a session-level advisory lock on the leader's own connection.

-- name: try_lock
SELECT pg_try_advisory_lock($1)

-- name: ping
SELECT 1

-- name: unlock
SELECT pg_advisory_unlock($1)
