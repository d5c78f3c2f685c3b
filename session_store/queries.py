"""Every SQL statement of the store, as static strings with ``$n`` parameters."""

# One round trip for the hot path: inbox dedupe (both keys, ON CONFLICT DO NOTHING catches
# either unique index), get-or-create the active session while allocating the next seq_no
# under the session's row lock, and append the message. When the inbox insert conflicts no
# later CTE produces a row, so nothing else is written and no seq_no is consumed.
INGEST_MESSAGE = """
WITH inbox AS (
    INSERT INTO inbound_events (platform, event_id, message_key, status, payload)
    VALUES ($1, $2, $3, 'accepted', $4)
    ON CONFLICT DO NOTHING
    RETURNING id
), sess AS (
    INSERT INTO sessions AS s (platform, scope, chat_id, thread_id, last_seq_no, message_count,
                               last_message_at, turn_requested_seq, title)
    SELECT $1, $5, $6, $7, 1, 1, now(), CASE WHEN $8 = 'always' THEN 1 ELSE 0 END, $9
    FROM inbox
    ON CONFLICT (platform, scope, chat_id, (coalesce(thread_id, ''))) WHERE status = 'active'
    DO UPDATE SET
        last_seq_no = s.last_seq_no + 1,
        message_count = s.message_count + 1,
        last_message_at = now(),
        updated_at = now(),
        turn_requested_seq = CASE
            WHEN $8 = 'always' OR ($8 = 'if_following' AND s.answered) THEN s.last_seq_no + 1
            ELSE s.turn_requested_seq END
    RETURNING s.id, s.last_seq_no, s.turn_requested_seq
), msg AS (
    INSERT INTO messages (session_id, seq_no, inbound_event_id, role, sender_id, sender_name,
                          external_id, reply_to_external_id, content, reply_target, command,
                          trigger, backfill, sent_at, metadata)
    SELECT sess.id, sess.last_seq_no, inbox.id, 'user', $10, $11, $12, $13, $14, $15, $16,
           CASE WHEN sess.turn_requested_seq = sess.last_seq_no THEN 'answer' ELSE 'context' END,
           $17, $18, $19
    FROM sess, inbox
    RETURNING id, session_id, seq_no, trigger
)
SELECT id, session_id, seq_no, trigger FROM msg
"""

# INGEST_MESSAGE for a batch of messages in ONE statement (session_store.batching: group
# commit). Parameters are arrays, one element per message, in INGEST_MESSAGE's order, sorted
# by session key (the lock order) and free of keys repeated within the batch (the batcher
# answers those as duplicates itself). Per session key, the accepted messages get the next
# seq numbers in array order; the session row is upserted once per key with the count, and a
# message asks for an answer exactly when INGEST_MESSAGE would have made it ask (``always``,
# or ``if_following`` in a session the bot has answered). Returns the accepted messages with
# their 1-based position in the arrays.
INGEST_MESSAGES_BATCH = """
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[],
                         $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                         $11::text[], $12::text[], $13::text[], $14::text[], $15::jsonb[],
                         $16::text[], $17::boolean[], $18::timestamptz[], $19::jsonb[])
        WITH ORDINALITY AS i(platform, event_id, message_key, payload, scope, chat_id,
                             thread_id, trig, title, sender_id, sender_name, external_id,
                             reply_to, content, target, command, backfill, sent_at, metadata,
                             ord)
), inbox AS (
    INSERT INTO inbound_events (platform, event_id, message_key, status, payload)
    SELECT platform, event_id, message_key, 'accepted', payload FROM input ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING id, platform, message_key
), accepted AS (
    SELECT i.*, inbox.id AS inbox_id, coalesce(i.thread_id, '') AS tkey,
           row_number() OVER (PARTITION BY i.platform, i.scope, i.chat_id,
                                           coalesce(i.thread_id, '') ORDER BY i.ord) AS rank
    FROM input i JOIN inbox ON inbox.platform = i.platform AND inbox.message_key = i.message_key
), grouped AS (
    SELECT platform, scope, chat_id, tkey,
           (array_agg(thread_id ORDER BY ord))[1] AS thread_id,
           (array_agg(title ORDER BY ord))[1] AS title,
           count(*) AS k,
           max(rank) FILTER (WHERE trig = 'always') AS ask_always,
           max(rank) FILTER (WHERE trig = 'if_following') AS ask_if_following
    FROM accepted GROUP BY platform, scope, chat_id, tkey
), sess AS (
    INSERT INTO sessions AS s (platform, scope, chat_id, thread_id, last_seq_no, message_count,
                               last_message_at, turn_requested_seq, title)
    SELECT platform, scope, chat_id, thread_id, k, k, now(), coalesce(ask_always, 0), title
    FROM grouped ORDER BY platform, scope, chat_id, tkey
    ON CONFLICT (platform, scope, chat_id, (coalesce(thread_id, ''))) WHERE status = 'active'
    DO UPDATE SET
        last_seq_no = s.last_seq_no + excluded.message_count,
        message_count = s.message_count + excluded.message_count,
        last_message_at = now(),
        updated_at = now(),
        turn_requested_seq = coalesce(
            s.last_seq_no + (
                SELECT greatest(g.ask_always, CASE WHEN s.answered THEN g.ask_if_following END)
                FROM grouped g
                WHERE g.platform = excluded.platform AND g.scope = excluded.scope
                  AND g.chat_id = excluded.chat_id
                  AND g.tkey = coalesce(excluded.thread_id, '')
            ),
            s.turn_requested_seq)
    RETURNING s.id, s.platform, s.scope, s.chat_id, coalesce(s.thread_id, '') AS tkey,
              s.last_seq_no, s.answered
), msg AS (
    INSERT INTO messages (session_id, seq_no, inbound_event_id, role, sender_id, sender_name,
                          external_id, reply_to_external_id, content, reply_target, command,
                          trigger, backfill, sent_at, metadata)
    SELECT sess.id, sess.last_seq_no - g.k + a.rank, a.inbox_id, 'user', a.sender_id,
           a.sender_name, a.external_id, a.reply_to, a.content, a.target, a.command,
           CASE WHEN a.trig = 'always' OR (a.trig = 'if_following' AND sess.answered)
                THEN 'answer' ELSE 'context' END,
           a.backfill, a.sent_at, a.metadata
    FROM accepted a
    JOIN grouped g USING (platform, scope, chat_id, tkey)
    JOIN sess USING (platform, scope, chat_id, tkey)
    ORDER BY a.ord
    RETURNING id, session_id, seq_no, trigger, inbound_event_id
)
SELECT msg.id, msg.session_id, msg.seq_no, msg.trigger, a.ord
FROM msg JOIN accepted a ON a.inbox_id = msg.inbound_event_id
"""

INSERT_INBOUND = """
INSERT INTO inbound_events (platform, event_id, message_key, status, reason, payload)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING id
"""

FIND_MESSAGE_BY_KEY = """
SELECT m.id, m.session_id
FROM inbound_events e JOIN messages m ON m.inbound_event_id = e.id
WHERE e.platform = $1 AND e.message_key = $2
"""

INSERT_ANNOTATION = """
INSERT INTO message_annotations (message_id, kind, content, metadata)
VALUES ($1, $2, $3, $4)
"""

MARK_EDITED = "UPDATE messages SET edited_at = now() WHERE id = $1"

HAS_ACTIVE_SESSION = """
SELECT EXISTS (
    SELECT 1 FROM sessions
    WHERE platform = $1 AND scope = $2 AND chat_id = $3
      AND coalesce(thread_id, '') = coalesce($4::text, '') AND status = 'active'
)
"""

_MESSAGE_COLUMNS = """
id, session_id, seq_no, role, content, sender_id, sender_name, external_id, command, trigger,
backfill, reply_target, model, tokens_used, edited_at, created_at
"""

RECENT = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages
WHERE session_id = $1 ORDER BY seq_no DESC LIMIT $2
"""

DELTA = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages
WHERE session_id = $1 AND seq_no > $2 ORDER BY seq_no LIMIT $3
"""

_SESSION_COLUMNS = """
id, platform, scope, chat_id, thread_id, status, title, selected_model, last_seq_no,
message_count, created_at, updated_at, last_message_at, metadata
"""

GET_SESSION = f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = $1"

GET_ACTIVE_SESSION_BY_KEY = f"""
SELECT {_SESSION_COLUMNS} FROM sessions
WHERE platform = $1 AND scope = $2 AND chat_id = $3
  AND coalesce(thread_id, '') = coalesce($4::text, '')
ORDER BY (status = 'active') DESC, id DESC
LIMIT 1
"""

LIST_SESSIONS = f"""
SELECT {_SESSION_COLUMNS} FROM sessions
WHERE ($1::text IS NULL OR platform = $1)
  AND ($2::text IS NULL OR status = $2)
  AND ($3::text IS NULL OR chat_id = $3)
  AND ($4::bigint IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5
"""

CLOSE_ACTIVE_SESSION = """
UPDATE sessions SET status = 'closed', closed_at = now(), updated_at = now()
WHERE id = $1 AND status = 'active'
RETURNING id
"""

# Claim one session with unanswered messages whose lease is free (or expired: the worker
# that held it died). SKIP LOCKED lets concurrent workers pass over each other's rows; the
# row lock makes the claim itself atomic.
CLAIM_TURN = """
UPDATE sessions s
SET turn_owner = $1, turn_lease_until = now() + make_interval(secs => $2)
WHERE s.id = (
    SELECT id FROM sessions
    WHERE turn_requested_seq > turn_done_seq
      AND (turn_lease_until IS NULL OR turn_lease_until < now())
      AND ($3::text[] IS NULL OR platform = ANY($3))
    ORDER BY last_message_at NULLS FIRST, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING s.id, s.platform, s.scope, s.chat_id, s.thread_id, s.turn_done_seq,
          s.turn_requested_seq, s.selected_model, s.status
"""

RENEW_TURN = """
UPDATE sessions SET turn_lease_until = now() + make_interval(secs => $3)
WHERE id = $1 AND turn_owner = $2
RETURNING id
"""

RELEASE_TURN = """
UPDATE sessions SET turn_owner = NULL, turn_lease_until = NULL
WHERE id = $1 AND turn_owner = $2
"""

# Finish a turn: allocate seq numbers for the replies and record how far the turn got, only
# while this worker still owns the lease (the fencing check that makes a taken-over turn's
# late result harmless).
FINISH_TURN = """
UPDATE sessions
SET last_seq_no = last_seq_no + $3,
    message_count = message_count + $3,
    turn_done_seq = greatest(turn_done_seq, $4),
    turn_owner = NULL,
    turn_lease_until = NULL,
    answered = answered OR $5,
    status = CASE WHEN $6 THEN 'closed' ELSE status END,
    closed_at = CASE WHEN $6 THEN now() ELSE closed_at END,
    updated_at = now(),
    last_message_at = CASE WHEN $3 > 0 THEN now() ELSE last_message_at END
WHERE id = $1 AND turn_owner = $2
RETURNING last_seq_no
"""

INSERT_ASSISTANT_MESSAGES = """
INSERT INTO messages (session_id, seq_no, role, content, model, tokens_used, metadata)
SELECT $1, seq, 'assistant', content, model, tokens, meta
FROM unnest($2::bigint[], $3::text[], $4::text[], $5::integer[], $6::jsonb[])
    AS r(seq, content, model, tokens, meta)
RETURNING id, seq_no
"""

INSERT_DELIVERIES = """
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content)
SELECT mid, $1, seq, part, $2, $3, content
FROM unnest($4::bigint[], $5::bigint[], $6::integer[], $7::text[]) AS r(mid, seq, part, content)
"""

# A part is claimable only when every earlier part of the same session is sent or failed, so
# parts and replies reach the platform in order even with many workers.
CLAIM_DELIVERIES = """
UPDATE deliveries d
SET status = 'sending', attempts = d.attempts + 1,
    lease_until = now() + make_interval(secs => $1)
WHERE d.id IN (
    SELECT c.id FROM deliveries c
    WHERE c.status = 'pending' AND c.next_attempt_at <= now()
      AND c.platform = ANY($2)
      AND NOT EXISTS (
          SELECT 1 FROM deliveries e
          WHERE e.session_id = c.session_id AND e.status IN ('pending', 'sending')
            AND (e.seq_no, e.part_no) < (c.seq_no, c.part_no)
      )
    ORDER BY c.next_attempt_at, c.id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
RETURNING d.id, d.message_id, d.session_id, d.seq_no, d.part_no, d.platform, d.target,
          d.content, d.status, d.attempts, d.last_error, d.platform_message_id
"""

MARK_SENT = """
UPDATE deliveries
SET status = 'sent', platform_message_id = $2, sent_at = now(), lease_until = NULL
WHERE id = $1 AND status = 'sending'
"""

MARK_RETRY = """
UPDATE deliveries
SET status = 'pending', next_attempt_at = now() + make_interval(secs => $2), last_error = $3,
    lease_until = NULL
WHERE id = $1 AND status = 'sending'
"""

MARK_FAILED = """
UPDATE deliveries SET status = 'failed', last_error = $2, lease_until = NULL
WHERE id = $1 AND status IN ('sending', 'pending')
"""

# Sends whose worker died mid-flight: the platform may or may not have the message.
EXPIRED_SENDING = """
SELECT id, platform FROM deliveries
WHERE status = 'sending' AND lease_until < now() AND platform = ANY($1)
FOR UPDATE SKIP LOCKED
"""

REQUEUE_DELIVERY = """
UPDATE deliveries SET status = 'pending', next_attempt_at = now(), lease_until = NULL,
    last_error = $2
WHERE id = $1
"""

RETRY_FAILED_DELIVERY = """
UPDATE deliveries SET status = 'pending', next_attempt_at = now(), attempts = 0
WHERE id = $1 AND status = 'failed'
RETURNING id
"""

DELIVERIES_FOR_SESSION = """
SELECT id, message_id, session_id, seq_no, part_no, platform, target, content, status,
       attempts, last_error, platform_message_id
FROM deliveries WHERE session_id = $1 ORDER BY seq_no, part_no
"""

DELIVERY_COUNTS = "SELECT status, count(*) AS n FROM deliveries GROUP BY status"

OLDEST_PENDING_AGE = """
SELECT extract(epoch FROM now() - min(created_at))::float8 FROM deliveries
WHERE status IN ('pending', 'sending')
"""

LOAD_CURSOR = "SELECT value FROM adapter_cursors WHERE name = $1"

SAVE_CURSOR = """
INSERT INTO adapter_cursors (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = now()
"""

LIST_CHATS = """
SELECT chat_id, count(*) AS sessions, max(last_message_at) AS last_message_at
FROM sessions WHERE platform = $1 GROUP BY chat_id ORDER BY max(last_message_at) DESC NULLS LAST
LIMIT $2
"""

# --- agent runtime (issue 6): context assembly, summaries, model choice, feedback ------------

# Everything a turn needs besides the transcript, in one round trip: the session's metadata
# and model choice, this person's last choice, where the question was asked (its metadata
# carries chat/channel names), and the newest summary that ends at or before the turn.
TURN_STATE = """
SELECT s.metadata, s.title, s.selected_model,
       (SELECT u.model FROM user_model_choices u
        WHERE u.platform = $3 AND u.user_id = $4) AS user_model,
       (SELECT m.metadata FROM messages m WHERE m.session_id = $1 AND m.seq_no = $2) AS place,
       sm.id AS summary_id, sm.from_seq, sm.to_seq, sm.content AS summary_content,
       sm.model AS summary_model, sm.model_written, sm.created_at AS summary_created_at
FROM sessions s
LEFT JOIN LATERAL (
    SELECT id, from_seq, to_seq, content, model, model_written, created_at
    FROM session_summaries
    WHERE session_id = s.id AND to_seq <= $5
    ORDER BY to_seq DESC, id DESC LIMIT 1
) sm ON true
WHERE s.id = $1
"""

# The agent's view of the transcript: commands and command answers (help, apologies) are not
# conversation; deleted messages are gone; an edited message reads as its newest edit.
# ``answers_seq`` places a reply right after what it answered even when messages that
# arrived during the run got lower seq numbers than the reply.
_CONTEXT_COLUMNS = """
m.id, m.seq_no, m.role, m.sender_id, m.sender_name,
CASE WHEN m.edited_at IS NULL THEN m.content ELSE coalesce(
    (SELECT a.content FROM message_annotations a
     WHERE a.message_id = m.id AND a.kind = 'edit' AND a.content IS NOT NULL
     ORDER BY a.id DESC LIMIT 1), m.content) END AS content,
(m.metadata->>'answers_seq')::bigint AS answers_seq,
m.metadata->'tool_calls' AS tool_calls,
m.metadata->>'tool_call_id' AS tool_call_id
"""
_CONTEXT_FILTER = """
m.session_id = $1 AND m.seq_no > $2 AND m.seq_no <= $3
AND ((m.role = 'user' AND m.command IS NULL)
     OR (m.role <> 'user' AND m.model IS DISTINCT FROM 'command'))
AND NOT EXISTS (SELECT 1 FROM message_annotations d
                WHERE d.message_id = m.id AND d.kind = 'delete')
"""

CONTEXT_NEWEST_FIRST = f"""
SELECT {_CONTEXT_COLUMNS} FROM messages m WHERE {_CONTEXT_FILTER}
ORDER BY m.seq_no DESC LIMIT $4
"""

CONTEXT_OLDEST_FIRST = f"""
SELECT {_CONTEXT_COLUMNS} FROM messages m WHERE {_CONTEXT_FILTER}
ORDER BY m.seq_no LIMIT $4
"""

_SUMMARY_COLUMNS = "id, session_id, from_seq, to_seq, content, model, model_written, created_at"

LATEST_SUMMARY = f"""
SELECT {_SUMMARY_COLUMNS} FROM session_summaries
WHERE session_id = $1 ORDER BY to_seq DESC, id DESC LIMIT 1
"""

LIST_SUMMARIES = f"""
SELECT {_SUMMARY_COLUMNS} FROM session_summaries WHERE session_id = $1 ORDER BY to_seq, id
"""

# Written only if it moves the session's summary forward: a replica (or an MCP client) that
# got as far already wins. Two replicas racing on one range may both write it; the newest
# (id) is the one used, and either is correct.
INSERT_ROLLING_SUMMARY = f"""
INSERT INTO session_summaries (session_id, from_seq, to_seq, content, model, model_written)
SELECT $1, $2, $3, $4, $5, $6
WHERE NOT EXISTS (SELECT 1 FROM session_summaries WHERE session_id = $1 AND to_seq >= $3)
RETURNING {_SUMMARY_COLUMNS}
"""

SET_SESSION_MODEL = """
UPDATE sessions SET selected_model = $2, updated_at = now() WHERE id = $1
"""

SET_USER_MODEL = """
INSERT INTO user_model_choices (platform, user_id, model) VALUES ($1, $2, $3)
ON CONFLICT (platform, user_id) DO UPDATE SET model = excluded.model, updated_at = now()
"""

TURN_REQUESTED_SEQ = "SELECT turn_requested_seq FROM sessions WHERE id = $1"

LOCK_ASSISTANT_MESSAGE = """
SELECT id FROM messages WHERE id = $1 AND role = 'assistant' FOR UPDATE
"""

UPSERT_FEEDBACK = """
INSERT INTO message_feedback (message_id, user_id, value) VALUES ($1, $2, $3)
ON CONFLICT (message_id, user_id) DO UPDATE SET value = excluded.value, updated_at = now()
"""

DELETE_FEEDBACK = "DELETE FROM message_feedback WHERE message_id = $1 AND user_id = $2"

# Runs after the row lock above, so its snapshot sees every earlier reaction.
REFRESH_FEEDBACK = """
UPDATE messages SET feedback = (
    SELECT sign(sum(value))::smallint FROM message_feedback WHERE message_id = $1
) WHERE id = $1
RETURNING feedback
"""

FIND_MESSAGE_BY_PLATFORM_ID = """
SELECT message_id FROM deliveries
WHERE platform = $1 AND platform_message_id = $2 AND target->>'chat_id' = $3
ORDER BY id LIMIT 1
"""

MESSAGE_ID_AT = "SELECT id FROM messages WHERE session_id = $1 AND seq_no = $2"

FEEDBACK_BY_SEQ = """
SELECT seq_no, feedback FROM messages WHERE session_id = $1 AND feedback IS NOT NULL
"""
