-- The operator surface (admin API, operator pages, MCP session tools): sessions with
-- everything attached to them, full-text search, dead letters, and the participants' writes.
-- The outbox's statements it runs stay with the outbox (session_store.queries). Includes
-- from elsewhere: session_columns and message_columns (repos/sessions.sql).

-- name: session_counts
-- Up to $1 sessions (an index or a bounded scan) and up to $1 active ones (the partial
-- unique index on active sessions), in one snapshot: when there are no more than $1
-- sessions, the closed ones are the rest; past it, estimates (session_store.estimates).
SELECT (SELECT count(*) FROM (SELECT 1 FROM sessions LIMIT $1) AS s) AS total,
       (SELECT count(*) FROM (SELECT 1 FROM sessions WHERE status = 'active' LIMIT $1) AS a)
           AS active

-- name: active_session_count
-- up to $1 of them, on the partial unique index on active sessions
SELECT count(*) FROM (SELECT 1 FROM sessions WHERE status = 'active' LIMIT $1) AS a

-- name: active_sessions
-- only planned (EXPLAIN), for its row estimate
SELECT 1 FROM sessions WHERE status = 'active'

-- name: closed_sessions
-- only planned (EXPLAIN), for its row estimate
SELECT 1 FROM sessions WHERE status = 'closed'

-- name: inbound_counts
SELECT status, count(*) AS n FROM inbound_events WHERE status <> 'accepted' GROUP BY status

-- name: participants
SELECT session_id, participant, role, display_name, last_read_seq, joined_at, metadata
FROM session_participants WHERE session_id = $1 ORDER BY joined_at, participant

-- name: checkpoints
SELECT id, session_id, name, status, seq_no, detail, created_at, updated_at
FROM session_checkpoints WHERE session_id = $1 ORDER BY id

-- name: links
SELECT id, session_id, linked_session_id, relation, url, created_at, link_type, target_ref
FROM session_links WHERE session_id = $1 ORDER BY id

-- name: add_link
INSERT INTO session_links (session_id, link_type, target_ref, relation) VALUES ($1, $2, $3, $4)
RETURNING id, session_id, linked_session_id, relation, url, created_at, link_type, target_ref

-- name: artifacts
SELECT id, session_id, kind, name, uri, content, seq_no, created_at, metadata
FROM session_artifacts WHERE session_id = $1 ORDER BY id

-- name: list_inbound_events
-- lists leave the raw payload out (it can be large); inbound_event has it
SELECT id, platform, event_id, message_key, status, reason, NULL::jsonb AS payload, received_at
FROM inbound_events
WHERE status = $1
  AND ($2::text IS NULL OR platform = $2)
  AND ($3::bigint IS NULL OR id < $3)
ORDER BY id DESC
LIMIT $4

-- name: get_inbound_event
SELECT id, platform, event_id, message_key, status, reason, payload, received_at
FROM inbound_events WHERE id = $1 AND status <> 'accepted'

-- name: search_session
-- 'simple' matches the generated column's configuration, so the GIN index applies;
-- websearch_to_tsquery accepts any text (quotes, OR, -word) without syntax errors. Snippets
-- use ts_headline's plain mode: its fragment mode drops trailing numbers ("version 42").
SELECT m.id, m.session_id, m.seq_no, m.role, m.sender_name, m.created_at,
       ts_headline('simple', m.content, query,
                   'StartSel=«, StopSel=», MaxWords=35, MinWords=15') AS snippet,
       ts_rank(m.content_tsv, query) AS rank,
       s.platform, s.scope, s.chat_id, s.thread_id, s.title, s.status
FROM messages m
JOIN sessions s ON s.id = m.session_id,
     websearch_to_tsquery('simple', $2) AS query
WHERE m.session_id = $1 AND m.content_tsv @@ query
  AND ($3::bigint IS NULL OR m.seq_no < $3)
ORDER BY m.seq_no DESC
LIMIT $4

-- name: search_all_count
-- Across sessions, newest first. Which plan is fast depends on how many messages match, and
-- the planner's estimate for a rare word is poor (it walked the whole primary key backwards
-- for a word in one message of 20,000): the store counts the matches through the GIN index,
-- capped, and picks search_all_few (GIN bitmap, then sort the few hits) or search_all_many
-- (walk messages newest first until `limit` hits: quick when the word is everywhere).
SELECT count(*) FROM (
    SELECT 1 FROM messages m, websearch_to_tsquery('simple', $1) AS query
    WHERE m.content_tsv @@ query AND ($2::bigint IS NULL OR m.id < $2)
    LIMIT $3
) AS capped

-- name: search_all
SELECT m.id, m.session_id, m.seq_no, m.role, m.sender_name, m.created_at,
       ts_headline('simple', m.content, query,
                   'StartSel=«, StopSel=», MaxWords=35, MinWords=15') AS snippet,
       ts_rank(m.content_tsv, query) AS rank,
       s.platform, s.scope, s.chat_id, s.thread_id, s.title, s.status
FROM messages m
JOIN sessions s ON s.id = m.session_id,
     websearch_to_tsquery('simple', $1) AS query
WHERE m.content_tsv @@ query
  AND ($2::text IS NULL OR s.platform = $2)
  AND ($3::bigint IS NULL OR m.id < $3)

-- name: search_all_many
{{search_all}}
ORDER BY m.id DESC LIMIT $4

-- name: search_all_few
-- "+ 0" hides the primary key's order from the planner, so it must filter through the GIN
-- index and sort the (few) matches
{{search_all}}
ORDER BY m.id + 0 DESC LIMIT $4

-- name: latest_user_target
-- Where a message appended by a participant goes: the target stored at ingest on the
-- session's newest user message (thread-exact, never re-derived), else the place's own
-- target stored when the session was opened for a first post (migration 0018).
SELECT coalesce(
    (SELECT reply_target FROM messages
     WHERE session_id = $1 AND role = 'user' AND reply_target IS NOT NULL
     ORDER BY seq_no DESC
     LIMIT 1),
    (SELECT reply_target FROM sessions WHERE id = $1))

-- name: allocate_seq
-- Allocates the next seq_no under the session's row lock, as ingest and finish_turn do, so
-- seq numbers stay dense whoever appends.
UPDATE sessions
SET last_seq_no = last_seq_no + 1, message_count = message_count + 1,
    last_message_at = now(), updated_at = now()
WHERE id = $1 AND status IN ('active', 'paused')
RETURNING last_seq_no

-- name: insert_participant_message
INSERT INTO messages (session_id, seq_no, role, sender_id, sender_name, content, model,
                      tokens_used, metadata, kind, importance)
VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8, $9, $10)
RETURNING {{message_columns}}

-- name: upsert_participant
INSERT INTO session_participants (session_id, participant, role, display_name, last_read_seq)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (session_id, participant) DO UPDATE SET
    last_read_seq = greatest(session_participants.last_read_seq, excluded.last_read_seq),
    display_name = coalesce(excluded.display_name, session_participants.display_name)
RETURNING session_id, participant, role, display_name, last_read_seq, joined_at, metadata

-- name: upsert_checkpoint
INSERT INTO session_checkpoints (session_id, name, status, seq_no, detail)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (session_id, name) DO UPDATE SET
    status = excluded.status,
    seq_no = coalesce(excluded.seq_no, session_checkpoints.seq_no),
    detail = coalesce(excluded.detail, session_checkpoints.detail),
    updated_at = now()
RETURNING id, session_id, name, status, seq_no, detail, created_at, updated_at

-- name: insert_artifact
INSERT INTO session_artifacts (session_id, kind, name, uri, content, seq_no, metadata)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, session_id, kind, name, uri, content, seq_no, created_at, metadata

-- name: session_status
SELECT status FROM sessions WHERE id = $1

-- name: create_session
-- A session for a place no platform message opened yet (an agent starting a conversation):
-- the active session of that key if there is one, else a new one (the partial unique index
-- on the active key decides races between two creators).
INSERT INTO sessions (platform, scope, chat_id, thread_id, title, kind, metadata, reply_target)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (platform, scope, chat_id, (coalesce(thread_id, ''))) WHERE status = 'active'
DO NOTHING
RETURNING {{session_columns}}

-- name: set_place_target
-- The place's own reply target on an active session that has none yet (a first post)
UPDATE sessions SET reply_target = $2 WHERE id = $1 AND reply_target IS NULL

-- name: active_session
SELECT {{session_columns}} FROM sessions
WHERE platform = $1 AND scope = $2 AND chat_id = $3
  AND coalesce(thread_id, '') = coalesce($4, '') AND status IN ('active', 'paused')

-- name: allocate_seqs
-- N seq numbers at once for a batch append (only while the session is open)
UPDATE sessions
SET last_seq_no = last_seq_no + $2, message_count = message_count + $2,
    last_message_at = now(), updated_at = now()
WHERE id = $1 AND status IN ('active', 'paused')
RETURNING last_seq_no
