-- Sessions' minutes: every session that closes is due them once (the trigger of migration
-- 0043); the cold-path worker claims them in batches across replicas and writes each as a
-- knowledge-base document, or marks it skipped where the place keeps no minutes.

-- name: claim_minutes
-- Up to $1 sessions due their minutes: the claim moves each one's due time a lease ($2
-- seconds) ahead and counts a try, so a worker that dies leaves them to a later claim.
WITH next AS (
    SELECT session_id FROM session_minutes
    WHERE state = 'due' AND due_at <= now()
    ORDER BY due_at, session_id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE session_minutes m
SET tries = m.tries + 1, due_at = now() + make_interval(secs => $2), updated_at = now()
FROM next, sessions s
WHERE m.session_id = next.session_id AND s.id = m.session_id
RETURNING m.session_id, m.tries, s.platform, s.scope, s.chat_id, s.thread_id

-- name: skip_minutes
UPDATE session_minutes SET state = 'skipped', updated_at = now()
WHERE session_id = ANY($1::bigint[]) AND state = 'due'

-- name: minutes_written
-- ... and the session is linked to its minutes as its output (once)
WITH done AS (
    UPDATE session_minutes
    SET state = 'written', kb = $2, document_id = $3, error = NULL, updated_at = now()
    WHERE session_id = $1
    RETURNING session_id
)
INSERT INTO session_links (session_id, link_type, target_ref, relation)
SELECT done.session_id, 'doc', 'kb-document:' || $3::bigint, 'output' FROM done
WHERE NOT EXISTS (
    SELECT 1 FROM session_links l
    WHERE l.session_id = $1 AND l.link_type = 'doc' AND l.relation = 'output'
      AND l.target_ref = 'kb-document:' || $3::bigint)

-- name: minutes_failed
-- a failed try: due again after $3 seconds, or failed for good after $4 tries
UPDATE session_minutes
SET error = $2, due_at = now() + make_interval(secs => $3), updated_at = now(),
    state = CASE WHEN tries >= $4 THEN 'failed' ELSE 'due' END
WHERE session_id = $1
RETURNING state

-- name: minutes_of_session
SELECT session_id, state, tries, kb, document_id, error, updated_at
FROM session_minutes WHERE session_id = $1

-- name: due_minutes
SELECT count(*) FROM session_minutes WHERE state = 'due'
