-- Sessions and their transcripts: reading them, closing them, feedback on replies.

-- name: session_columns
-- the one column list of SessionRecord
id, platform, scope, chat_id, thread_id, status, title, kind, selected_model, last_seq_no,
message_count, created_at, updated_at, last_message_at, closed_at, metadata, topic, priority, tags

-- name: message_columns
-- the one column list of MessageRecord
id, session_id, seq_no, role, content, sender_id, sender_name, external_id, command, trigger,
backfill, reply_target, model, tokens_used, feedback, edited_at, created_at, metadata, traceparent,
kind, importance

-- name: pending_columns
-- message_columns as a turn reads the messages it answers: an edited message's newest text
-- (the stored row keeps its first), and whether it was deleted on its platform (or, for a
-- request to write an answer again, its question was)
id, session_id, seq_no, role,
CASE WHEN edited_at IS NULL THEN content ELSE coalesce(
    (SELECT a.content FROM message_annotations a
     WHERE a.message_id = messages.id AND a.kind = 'edit' AND a.content IS NOT NULL
     ORDER BY a.id DESC LIMIT 1), content) END AS content,
sender_id, sender_name, external_id, command, trigger,
backfill, reply_target, model, tokens_used, feedback, edited_at, created_at, metadata, traceparent,
kind, importance,
(EXISTS (SELECT 1 FROM message_annotations d
         WHERE d.message_id = messages.id AND d.kind = 'delete')
 -- a request to write an answer again goes with its question
 OR (metadata ? 'rewrites' AND EXISTS (
         SELECT 1 FROM messages q JOIN message_annotations d ON d.message_id = q.id
         WHERE q.session_id = messages.session_id
           AND q.seq_no = (messages.metadata->>'rewrites')::bigint AND d.kind = 'delete')))
    AS deleted

-- name: pending_after
SELECT {{pending_columns}} FROM messages
WHERE session_id = $1 AND seq_no > $2 ORDER BY seq_no LIMIT $3

-- name: pending_before
-- messages_before as the thread reads now (pending_columns): newest texts, deletions marked
SELECT {{pending_columns}} FROM messages
WHERE session_id = $1 AND seq_no < $2 AND seq_no > $4 ORDER BY seq_no DESC LIMIT $3

-- name: messages_after
SELECT {{message_columns}} FROM messages
WHERE session_id = $1 AND seq_no > $2 ORDER BY seq_no LIMIT $3

-- name: messages_before
-- newest first, after $4 (0: from the start); the caller reverses to seq order
SELECT {{message_columns}} FROM messages
WHERE session_id = $1 AND seq_no < $2 AND seq_no > $4 ORDER BY seq_no DESC LIMIT $3

-- name: get_session
SELECT {{session_columns}} FROM sessions WHERE id = $1

-- name: find_session_by_key
-- the open (active or paused) session of a place, else its newest closed or archived one
SELECT {{session_columns}} FROM sessions
WHERE platform = $1 AND scope = $2 AND chat_id = $3
  AND coalesce(thread_id, '') = coalesce($4::text, '')
ORDER BY (status IN ('active', 'paused')) DESC, id DESC
LIMIT 1

-- name: list_sessions
-- Newest activity first. The keyset cursor is (last_message_at, id) of the last row seen;
-- $6 says whether there is a cursor at all, since its timestamp may itself be NULL
-- (NULLS LAST: rows without activity come after every row with some).
SELECT {{session_columns}} FROM sessions
WHERE ($1::text IS NULL OR platform = $1)
  AND ($2::text IS NULL OR chat_id = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::text IS NULL OR title ILIKE '%' || $4 || '%' ESCAPE '\')
  AND ($5::text IS NULL OR thread_id = $5)
  AND ($10::text IS NULL OR topic ILIKE '%' || $10 || '%' ESCAPE '\')
  AND ($11::smallint IS NULL OR priority >= $11)
  AND ($12::text[] IS NULL OR tags @> $12)
  AND (NOT $6::boolean
       OR ($7::timestamptz IS NOT NULL AND (last_message_at < $7
                                            OR (last_message_at = $7 AND id < $8)
                                            OR last_message_at IS NULL))
       OR ($7::timestamptz IS NULL AND last_message_at IS NULL AND id < $8))
ORDER BY last_message_at DESC NULLS LAST, id DESC
LIMIT $9

-- name: has_active_session
SELECT EXISTS (
    SELECT 1 FROM sessions
    WHERE platform = $1 AND scope = $2 AND chat_id = $3
      AND coalesce(thread_id, '') = coalesce($4::text, '') AND status = 'active'
)

-- name: list_chats
SELECT chat_id, count(*) AS sessions, max(last_message_at) AS last_message_at
FROM sessions WHERE platform = $1 GROUP BY chat_id ORDER BY max(last_message_at) DESC NULLS LAST
LIMIT $2

-- name: close_active_session
UPDATE sessions SET status = 'closed', closed_at = now(), updated_at = now()
WHERE id = $1 AND status IN ('active', 'paused')
RETURNING id

-- name: message_id_at
SELECT id FROM messages WHERE session_id = $1 AND seq_no = $2

-- name: lock_assistant_message
SELECT id FROM messages WHERE id = $1 AND role = 'assistant' FOR UPDATE

-- name: upsert_feedback
INSERT INTO message_feedback (message_id, user_id, value) VALUES ($1, $2, $3)
ON CONFLICT (message_id, user_id) DO UPDATE SET value = excluded.value, updated_at = now()

-- name: delete_feedback
DELETE FROM message_feedback WHERE message_id = $1 AND user_id = $2

-- name: refresh_feedback
-- Runs after the row lock above, so its snapshot sees every earlier reaction.
UPDATE messages SET feedback = (
    SELECT sign(sum(value))::smallint FROM message_feedback WHERE message_id = $1
) WHERE id = $1
RETURNING feedback

-- name: find_message_by_platform_id
SELECT message_id FROM deliveries
WHERE platform = $1 AND platform_message_id = $2 AND target->>'chat_id' = $3
ORDER BY id LIMIT 1

-- name: feedback_by_seq
SELECT seq_no, feedback FROM messages WHERE session_id = $1 AND feedback IS NOT NULL

-- name: transcript
-- transcripts of voice notes and audio, kept on the message they were shared with
SELECT metadata->>'transcript' FROM messages WHERE id = $1 AND metadata ? 'transcript'

-- name: save_transcript
-- the first transcript wins (a job run twice, by two workers, stores one); the transcript
-- becomes the message's text (after a caption, if any), marked as transcribed; never on a
-- message erased meanwhile (``gateway people forget``)
UPDATE messages
SET content = CASE WHEN content = '' THEN $2 ELSE content || E'\n\n' || $2 END,
    metadata = metadata || jsonb_build_object('transcribed', true, 'transcript', $2::text)
WHERE id = $1 AND NOT (metadata ? 'transcript') AND NOT (metadata ? 'erased')
RETURNING id

-- name: move_status
-- One lifecycle step: to $2 from one of $3 (active <-> paused, active|paused -> closed ->
-- archived); no row when the session is not in one of them.
UPDATE sessions
SET status = $2, updated_at = now(),
    closed_at = CASE WHEN $2 = 'closed' THEN now() ELSE closed_at END
WHERE id = $1 AND status = ANY($3::text[])
RETURNING {{session_columns}}

-- name: set_attributes
-- topic, priority and tags, each kept when its argument is NULL; archived sessions are
-- read-only
UPDATE sessions
SET topic = coalesce($2, topic), priority = coalesce($3, priority),
    tags = coalesce($4, tags), updated_at = now()
WHERE id = $1 AND status <> 'archived'
RETURNING {{session_columns}}

-- name: session_decisions
-- a session's decisions, oldest first, from the partial index messages_decisions
SELECT {{message_columns}} FROM messages
WHERE session_id = $1 AND kind = 'decision'
ORDER BY seq_no
LIMIT $2

-- name: open_checkpoints
-- a session's unresolved checkpoints, from the partial index session_checkpoints_open
SELECT id, session_id, name, status, seq_no, detail, created_at, updated_at
FROM session_checkpoints
WHERE session_id = $1 AND status NOT IN ('done', 'cancelled')
ORDER BY id

-- name: get_session_exists
SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)
