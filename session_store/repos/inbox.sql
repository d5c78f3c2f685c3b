-- The inbox: every inbound event once (deduped on the platform's event id and on the
-- message's identity in its chat), the messages it becomes, and each adapter's cursor.

-- name: ingest_message
-- One round trip for the hot path: inbox dedupe (both keys, ON CONFLICT DO NOTHING catches
-- either unique index), get-or-create the active session while allocating the next seq_no
-- under the session's row lock, and append the message. When the inbox insert conflicts no
-- later CTE produces a row, so nothing else is written and no seq_no is consumed. $8 is the
-- message's TurnRequest: ask for a turn always, only if the session is engaged, or never. A
-- session is engaged (answered) once the bot was addressed there: a message that asks for a
-- turn engages it at once, not when its answer is recorded, since the person sees the answer
-- streaming before that and replies to it. Nothing of the bot is visible in a place before a
-- turn was asked for there, so this also covers "anything of the bot is visible".
WITH inbox AS (
    INSERT INTO inbound_events (platform, event_id, message_key, status, payload)
    VALUES ($1, $2, $3, 'accepted', $4)
    ON CONFLICT DO NOTHING
    RETURNING id
), sess AS (
    INSERT INTO sessions AS s (platform, scope, chat_id, thread_id, last_seq_no, message_count,
                               last_message_at, turn_requested_seq, title, answered,
                               turn_not_before)
    SELECT $1, $5, $6, $7, 1, 1, now(), CASE WHEN $8 = 'always' THEN 1 ELSE 0 END, $9,
           $8 = 'always',
           CASE WHEN $21::float8 > 0 AND $8 = 'always' THEN now() + make_interval(secs => $21::float8) END
    FROM inbox
    ON CONFLICT (platform, scope, chat_id, (coalesce(thread_id, '')))
        WHERE status IN ('active', 'paused')
    DO UPDATE SET
        -- a paused session stores what arrives; /resume typed in it makes it active again
        status = CASE WHEN $16 = 'resume' THEN 'active' ELSE s.status END,
        last_seq_no = s.last_seq_no + 1,
        message_count = s.message_count + 1,
        last_message_at = now(),
        updated_at = now(),
        turn_requested_seq = CASE
            WHEN $8 = 'always' OR ($8 = 'if_answered' AND s.answered) THEN s.last_seq_no + 1
            ELSE s.turn_requested_seq END,
        answered = s.answered OR $8 = 'always',
        -- a burst ($21 seconds, 0 = off): the turn waits until the thread was quiet that long;
        -- each message that asks for a turn moves the time on
        turn_not_before = CASE
            WHEN $8 = 'always' OR ($8 = 'if_answered' AND s.answered) THEN
                CASE WHEN $21::float8 > 0 THEN now() + make_interval(secs => $21::float8) END
            ELSE s.turn_not_before END
    RETURNING s.id, s.last_seq_no, s.turn_requested_seq
), msg AS (
    INSERT INTO messages (session_id, seq_no, inbound_event_id, role, sender_id, sender_name,
                          external_id, reply_to_external_id, content, reply_target, command,
                          trigger, backfill, sent_at, metadata, traceparent, kind)
    SELECT sess.id, sess.last_seq_no, inbox.id, 'user', $10, $11, $12, $13, $14, $15, $16,
           CASE WHEN sess.turn_requested_seq = sess.last_seq_no THEN 'answer' ELSE 'context' END,
           $17, $18, $19, $20,
           -- /decision TEXT is stored as a decision (a bare /decision records nothing)
           CASE WHEN $16 = 'decision' AND $14 ~* '/decision(@\S*)?\s+\S' THEN 'decision'
                ELSE 'chat' END
    FROM sess, inbox
    RETURNING id, session_id, seq_no, trigger
)
SELECT id, session_id, seq_no, trigger FROM msg

-- name: insert_inbound
INSERT INTO inbound_events (platform, event_id, message_key, status, reason, payload)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING id

-- name: find_message_by_key
-- through the dedupe keys (unique, unpartitioned): the inbox itself is partitioned by month
SELECT m.id, m.session_id, m.seq_no
FROM inbound_keys k JOIN messages m ON m.inbound_event_id = k.inbound_event_id
WHERE k.platform = $1 AND k.message_key = $2

-- name: insert_annotation
INSERT INTO message_annotations (message_id, kind, content, metadata)
VALUES ($1, $2, $3, $4)

-- name: mark_edited
UPDATE messages SET edited_at = now() WHERE id = $1

-- name: load_cursor
SELECT value FROM adapter_cursors WHERE name = $1

-- name: save_cursor
INSERT INTO adapter_cursors (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = now()
