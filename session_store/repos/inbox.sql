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

-- name: request_rewrite
-- An edit of the thread's latest question after it was answered, where the place's profile
-- says on_edit = "update": the answer is written again for the edited text. The request is a
-- message of the session (role user, metadata.rewrites = the question's seq) that asks for a
-- turn like any question; the context never reads it (its question reads as the newest edit).
-- What it replaces leaves the context: the answer, its tool exchanges and earlier requests.
-- No row: the message is not the latest question, not answered yet (a queued turn reads the
-- edit anyway), deleted, or its session is not active.
WITH q AS (
    SELECT m.id, m.session_id, m.seq_no, m.sender_id, m.sender_name, m.reply_target,
           m.metadata
    FROM messages m JOIN sessions s ON s.id = m.session_id
    WHERE m.id = $1 AND m.role = 'user' AND m.trigger = 'answer' AND m.command IS NULL
      AND s.status = 'active' AND m.seq_no <= s.turn_done_seq
      AND NOT EXISTS (SELECT 1 FROM message_annotations d
                      WHERE d.message_id = m.id AND d.kind = 'delete')
      AND NOT EXISTS (SELECT 1 FROM messages n
                      WHERE n.session_id = m.session_id AND n.seq_no > m.seq_no
                        AND n.role = 'user' AND n.trigger = 'answer'
                        AND NOT (n.metadata ? 'rewrites'))
      AND EXISTS (SELECT 1 FROM messages r
                  WHERE r.session_id = m.session_id AND r.seq_no > m.seq_no
                    AND r.role = 'assistant' AND r.model IS DISTINCT FROM 'command')
), old AS (
    INSERT INTO message_annotations (message_id, kind, metadata)
    SELECT r.id, 'delete', jsonb_build_object('superseded', true) FROM messages r, q
    WHERE r.session_id = q.session_id AND r.seq_no > q.seq_no
      AND ((r.role IN ('assistant', 'tool') AND r.model IS DISTINCT FROM 'command')
           OR (r.role = 'user' AND r.metadata ? 'rewrites'))
      AND NOT EXISTS (SELECT 1 FROM message_annotations d
                      WHERE d.message_id = r.id AND d.kind = 'delete')
), sess AS (
    UPDATE sessions s
    SET last_seq_no = s.last_seq_no + 1, message_count = s.message_count + 1,
        last_message_at = now(), updated_at = now(), turn_requested_seq = s.last_seq_no + 1
    FROM q WHERE s.id = q.session_id
    RETURNING s.id, s.last_seq_no
)
INSERT INTO messages (session_id, seq_no, role, sender_id, sender_name, content, reply_target,
                      trigger, metadata, kind)
SELECT sess.id, sess.last_seq_no, 'user', q.sender_id, q.sender_name, $2, q.reply_target,
       'answer', q.metadata || jsonb_build_object('rewrites', q.seq_no), 'chat'
FROM sess, q
RETURNING id, seq_no

-- name: retract_answer
-- A deleted question whose place says on_delete = "retract": the bot's answer to it is
-- deleted on the platform too. Its answer is what the turns that handled it up to the next
-- question wrote (a rewritten answer included); each of its parts gets a delete_message row
-- after the answer's own parts (part 10000 + n: in order behind them), naming the delivery
-- whose platform message it deletes. The answer leaves the context. Run once per deletion
-- (the inbox dedupes the event); a part already retracted is not retracted again.
WITH q AS (
    SELECT m.session_id, m.seq_no FROM messages m
    WHERE m.id = $1 AND m.role = 'user' AND m.trigger = 'answer'
), nxt AS (
    SELECT coalesce(min(n.seq_no), 9223372036854775807) AS seq FROM messages n, q
    WHERE n.session_id = q.session_id AND n.seq_no > q.seq_no AND n.role = 'user'
      AND n.trigger = 'answer' AND NOT (n.metadata ? 'rewrites')
), answer AS (
    SELECT r.id FROM messages r, q, nxt
    WHERE r.session_id = q.session_id AND r.seq_no > q.seq_no
      AND r.role = 'assistant' AND r.model IS DISTINCT FROM 'command'
      AND (r.metadata->>'answers_seq')::bigint >= q.seq_no
      AND (r.metadata->>'answers_seq')::bigint < nxt.seq
), gone AS (
    INSERT INTO message_annotations (message_id, kind, metadata)
    SELECT answer.id, 'delete', jsonb_build_object('retracted', true) FROM answer
    WHERE NOT EXISTS (SELECT 1 FROM message_annotations d
                      WHERE d.message_id = answer.id AND d.kind = 'delete')
)
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                        kind, part)
SELECT d.message_id, d.session_id, d.seq_no, 10000 + d.part_no, d.platform, d.target, '',
       'delete_message', jsonb_build_object('v', 1, 'delivery_id', d.id)
FROM deliveries d JOIN answer ON answer.id = d.message_id
WHERE d.kind IN ('text', 'file', 'edit_message') AND d.part_no < 10000
ON CONFLICT (message_id, part_no) DO NOTHING
RETURNING id
