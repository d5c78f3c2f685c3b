-- Schedules and their firings (migration 0018). A firing is one transaction: the due rows
-- are locked (SKIP LOCKED: replicas pass over each other's), each firing row is inserted
-- under the unique (schedule_id, due_at) fence, the place's session gets the prompt as a
-- system message that asks for a turn, and the schedule's next firing is written. The turn
-- itself then runs under the turn scheduler's own lease and fencing token.

-- name: schedule_columns
id, name, platform, scope, chat_id, thread_id, prompt, owner, time_zone, fire_at, cron,
status, paused_reason, next_fire_at, last_fire_at, last_outcome, failures, created_at

-- name: add_schedule
INSERT INTO schedules (name, platform, scope, chat_id, thread_id, prompt, owner, time_zone,
                       fire_at, cron, next_fire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
RETURNING {{schedule_columns}}

-- name: get_schedule
SELECT {{schedule_columns}} FROM schedules WHERE id = $1

-- name: list_schedules
-- Optionally one place's ($1..$4, all NULL: every place) or one owner's ($5)
SELECT {{schedule_columns}} FROM schedules
WHERE ($1::text IS NULL OR (platform = $1 AND scope = $2 AND chat_id = $3
                            AND coalesce(thread_id, '') = coalesce($4, '')))
  AND ($5::text IS NULL OR owner = $5)
ORDER BY id
LIMIT $6

-- name: delete_schedule
DELETE FROM schedules WHERE id = $1 RETURNING {{schedule_columns}}

-- name: lock_due
-- The due schedules ($2: the firing loop's clock) no other replica is firing right now,
-- oldest due first.
SELECT {{schedule_columns}} FROM schedules
WHERE status = 'active' AND next_fire_at <= $2
ORDER BY next_fire_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED

-- name: lock_schedule
SELECT {{schedule_columns}} FROM schedules WHERE id = $1 FOR UPDATE

-- name: skip_firing
-- A firing too late to run, recorded as skipped (the fence: the same one twice fails).
INSERT INTO schedule_firings (schedule_id, due_at, outcome, reason, settled_at)
VALUES ($1, $2, 'skipped', $3, now())

-- name: fire
-- One firing in one statement: the prompt as a system message of the place's active session
-- (opened if there is none, with the place's own reply target), asking for a turn like a
-- user message would, and the firing recorded with it. The unique (schedule_id, due_at) is
-- the fence: the same firing reached twice fails and its transaction writes nothing.
WITH sess AS (
    INSERT INTO sessions AS s (platform, scope, chat_id, thread_id, last_seq_no, message_count,
                               last_message_at, turn_requested_seq, answered, reply_target)
    VALUES ($1, $2, $3, $4, 1, 1, now(), 1, true, $5)
    ON CONFLICT (platform, scope, chat_id, (coalesce(thread_id, ''))) WHERE status = 'active'
    DO UPDATE SET
        last_seq_no = s.last_seq_no + 1,
        message_count = s.message_count + 1,
        last_message_at = now(),
        updated_at = now(),
        turn_requested_seq = s.last_seq_no + 1,
        answered = true,
        reply_target = coalesce(s.reply_target, excluded.reply_target)
    RETURNING s.id, s.last_seq_no
), msg AS (
    INSERT INTO messages (session_id, seq_no, role, sender_id, sender_name, content,
                          reply_target, trigger, metadata)
    SELECT sess.id, sess.last_seq_no, 'system', 'scheduler', 'scheduler', $6, $5, 'answer',
           $7::jsonb || jsonb_build_object('due_at', $9::timestamptz)
    FROM sess
    RETURNING session_id, seq_no
)
INSERT INTO schedule_firings (schedule_id, due_at, outcome, session_id, seq_no)
SELECT $8, $9, 'queued', msg.session_id, msg.seq_no FROM msg
RETURNING id, session_id, seq_no

-- name: advance
-- After a batch of firings (or skipped ones): each schedule's next time, or done for a
-- one-shot; $4: 'skipped' for a skipped firing, NULL otherwise (its outcome comes later).
UPDATE schedules s
SET next_fire_at = u.next_at,
    status = CASE WHEN u.next_at IS NULL THEN 'done' ELSE s.status END,
    last_fire_at = u.due_at,
    last_outcome = coalesce(u.outcome, s.last_outcome),
    updated_at = now()
FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], $4::text[])
    AS u (id, next_at, due_at, outcome)
WHERE s.id = u.id

-- name: open_firings
-- Queued firings whose turn has run, with what became of their answer: the assistant
-- messages of the first turn that handled the firing's message (answers_seq) and their
-- deliveries.
SELECT f.id, f.schedule_id, f.session_id, f.seq_no, a.answer_seq,
       coalesce(d.parts, 0) AS parts, coalesce(d.sent, 0) AS sent,
       coalesce(d.failed, 0) AS failed, d.error, coalesce(d.apology, false) AS apology
FROM schedule_firings f
JOIN sessions s ON s.id = f.session_id AND s.turn_done_seq >= f.seq_no
LEFT JOIN LATERAL (
    SELECT min((m.metadata->>'answers_seq')::bigint) AS answer_seq
    FROM messages m
    WHERE m.session_id = f.session_id AND m.seq_no > f.seq_no AND m.role = 'assistant'
      AND (m.metadata->>'answers_seq')::bigint >= f.seq_no
) a ON true
LEFT JOIN LATERAL (
    SELECT count(dl.id) AS parts,
           count(dl.id) FILTER (WHERE dl.status = 'sent') AS sent,
           count(dl.id) FILTER (WHERE dl.status = 'failed') AS failed,
           max(dl.last_error) FILTER (WHERE dl.status = 'failed') AS error,
           bool_or(m.metadata ? 'failed_turn') AS apology
    FROM messages m LEFT JOIN deliveries dl ON dl.message_id = m.id
    WHERE m.session_id = f.session_id AND m.seq_no > f.seq_no AND m.role = 'assistant'
      AND (m.metadata->>'answers_seq')::bigint = a.answer_seq
) d ON true
WHERE f.outcome = 'queued'
ORDER BY f.id
LIMIT $1

-- name: settle_firing
-- One replica settles a firing (the outcome guard), and the schedule counts its failures in
-- a row; the fifth pauses it.
WITH f AS (
    UPDATE schedule_firings SET outcome = $2, reason = $3, settled_at = now()
    WHERE id = $1 AND outcome = 'queued'
    RETURNING schedule_id
)
UPDATE schedules s
SET last_outcome = $2,
    failures = CASE WHEN $2 = 'sent' THEN 0 ELSE s.failures + 1 END,
    status = CASE WHEN $2 <> 'sent' AND s.failures + 1 >= $4 AND s.status = 'active'
                  THEN 'paused' ELSE s.status END,
    paused_reason = CASE WHEN $2 <> 'sent' AND s.failures + 1 >= $4 AND s.status = 'active'
                         THEN $5 ELSE s.paused_reason END,
    updated_at = now()
FROM f WHERE s.id = f.schedule_id
RETURNING {{schedule_columns}}

-- name: pause_schedule
UPDATE schedules SET status = 'paused', paused_reason = $2, updated_at = now()
WHERE id = $1 AND status = 'active'
RETURNING {{schedule_columns}}

-- name: recent_firings
SELECT id, schedule_id, due_at, fired_at, outcome, reason, session_id, seq_no, settled_at
FROM schedule_firings WHERE schedule_id = $1 ORDER BY due_at DESC LIMIT $2

-- name: firing_counts
SELECT outcome, count(*) AS n FROM schedule_firings GROUP BY outcome
