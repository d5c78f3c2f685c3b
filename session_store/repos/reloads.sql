-- One reload for every replica (migration 0033; gateway/runtime/reloads.py).

-- name: request_reload
-- a request naming every replica live now
INSERT INTO config_reloads (actor, path, replicas)
SELECT $1, $2, coalesce(array_agg(id ORDER BY id), ARRAY[]::bigint[]) FROM ({{live_processes}}) AS live (id)
RETURNING id, replicas

-- name: pending_reloads
-- the requests of the last hour this replica was asked and has not answered, oldest first
SELECT r.id, r.path FROM config_reloads r
WHERE r.requested_at > now() - interval '1 hour' AND $1 = ANY (r.replicas)
  AND NOT EXISTS (SELECT 1 FROM config_reload_reports p
                  WHERE p.reload_id = r.id AND p.process_id = $1)
ORDER BY r.id

-- name: report_reload
INSERT INTO config_reload_reports (reload_id, process_id, host, pid, outcome, path, sha256, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (reload_id, process_id) DO NOTHING

-- name: reload_reports
-- each replica asked: its report, or none yet; and whether it still lives
SELECT a.process_id, p.host, p.pid, p.outcome, p.path, p.sha256, p.error,
       a.process_id IN ({{live_processes}}) AS alive
FROM config_reloads r, unnest(r.replicas) AS a (process_id)
LEFT JOIN config_reload_reports p ON p.reload_id = $1 AND p.process_id = a.process_id
WHERE r.id = $1
ORDER BY a.process_id

-- name: prune_reloads
DELETE FROM config_reloads WHERE requested_at < now() - interval '30 days'
