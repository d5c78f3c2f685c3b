"""Every SQL statement of the store, as static strings with ``$n`` parameters."""

# One round trip for the hot path: inbox dedupe (both keys, ON CONFLICT DO NOTHING catches
# either unique index), get-or-create the active session while allocating the next seq_no
# under the session's row lock, and append the message. When the inbox insert conflicts no
# later CTE produces a row, so nothing else is written and no seq_no is consumed. ``$8`` is
# the message's ``TurnRequest``: ask for a turn always, only if the bot already answered in
# this session, or never.
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
            WHEN $8 = 'always' OR ($8 = 'if_answered' AND s.answered) THEN s.last_seq_no + 1
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

# --- the one column list of each record (records.py reads exactly these) -------------------

SESSION_COLUMNS = """
id, platform, scope, chat_id, thread_id, status, title, kind, selected_model, last_seq_no,
message_count, created_at, updated_at, last_message_at, closed_at, metadata
"""

MESSAGE_COLUMNS = """
id, session_id, seq_no, role, content, sender_id, sender_name, external_id, command, trigger,
backfill, reply_target, model, tokens_used, feedback, edited_at, created_at, metadata
"""

DELIVERY_COLUMNS = """
id, message_id, session_id, seq_no, part_no, platform, target, content, status, attempts,
next_attempt_at, last_error, platform_message_id, created_at, sent_at, claim_token, ambiguous,
pacing_until, kind, part, data
"""

SUMMARY_COLUMNS = "id, session_id, from_seq, to_seq, content, model, model_written, created_at"

# --- sessions and messages ----------------------------------------------------------------

MESSAGES_AFTER = f"""
SELECT {MESSAGE_COLUMNS} FROM messages
WHERE session_id = $1 AND seq_no > $2 ORDER BY seq_no LIMIT $3
"""

# newest first; the caller reverses to seq order
MESSAGES_BEFORE = f"""
SELECT {MESSAGE_COLUMNS} FROM messages
WHERE session_id = $1 AND seq_no < $2 ORDER BY seq_no DESC LIMIT $3
"""

GET_SESSION = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"

# the active session of a place, else its newest closed one
FIND_SESSION_BY_KEY = f"""
SELECT {SESSION_COLUMNS} FROM sessions
WHERE platform = $1 AND scope = $2 AND chat_id = $3
  AND coalesce(thread_id, '') = coalesce($4::text, '')
ORDER BY (status = 'active') DESC, id DESC
LIMIT 1
"""

# Newest activity first. The keyset cursor is (last_message_at, id) of the last row seen;
# ``$6`` says whether there is a cursor at all, since its timestamp may itself be NULL
# (NULLS LAST: rows without activity come after every row with some).
LIST_SESSIONS = f"""
SELECT {SESSION_COLUMNS} FROM sessions
WHERE ($1::text IS NULL OR platform = $1)
  AND ($2::text IS NULL OR chat_id = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::text IS NULL OR title ILIKE '%' || $4 || '%' ESCAPE '\\')
  AND ($5::text IS NULL OR thread_id = $5)
  AND (NOT $6::boolean
       OR ($7::timestamptz IS NOT NULL AND (last_message_at < $7
                                            OR (last_message_at = $7 AND id < $8)
                                            OR last_message_at IS NULL))
       OR ($7::timestamptz IS NULL AND last_message_at IS NULL AND id < $8))
ORDER BY last_message_at DESC NULLS LAST, id DESC
LIMIT $9
"""

SESSION_STATUS = "SELECT status FROM sessions WHERE id = $1"

CLOSE_ACTIVE_SESSION = """
UPDATE sessions SET status = 'closed', closed_at = now(), updated_at = now()
WHERE id = $1 AND status = 'active'
RETURNING id
"""

# Claim one session with unanswered messages whose lease is free (or expired: the worker
# that held it died). SKIP LOCKED lets concurrent workers pass over each other's rows; the
# row lock makes the claim itself atomic.
# --- process liveness (issue 12, migration 0004) ----------------------------------------
# A gateway process holds the advisory lock (PROCESS_LOCK_CLASS, its id) on a dedicated
# connection while it lives. These are the ids whose lock is held in this database now.
PROCESS_LOCK_CLASS = 71717171
LIVE_PROCESSES = f"""
SELECT l.objid::bigint FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.classid = {PROCESS_LOCK_CLASS} AND l.objsubid = 2
  AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
NEXT_PROCESS_ID = "SELECT nextval('gateway_process_ids')::integer"
#: the liveness check: the other live gateway processes (``gateway.pacing`` paces in memory
#: while there are none)
COUNT_PEERS = f"SELECT count(*)::integer FROM ({LIVE_PROCESSES}) AS live (id) WHERE id <> $1"

#: a claim's process is dead: it holds no liveness lock, and that is known to be final. A
#: database restart drops every lock until each live process has reconnected (within a second:
#: ``session_store.liveness``), so "no lock" proves death only for a process that took its lock
#: in this server lifetime (``gateway_processes``, migration 0012) and has lost it since, or
#: once some process re-locked in this lifetime more than RELOCK_GRACE ago: a live owner never
#: waits longer than that to re-lock, so it is not robbed; a dead one is found at once.
RELOCK_GRACE = "interval '1.2 seconds'"


def _dead(column: str) -> str:
    return f"""({column} IS NOT NULL AND {column} NOT IN ({LIVE_PROCESSES})
        AND EXISTS (SELECT 1 FROM gateway_processes p
                    WHERE p.server_started_at = pg_postmaster_start_time()
                      AND (p.id = {column} OR p.locked_at < now() - {RELOCK_GRACE})))"""


#: after taking the lock: this process locked in this server lifetime
REGISTER_PROCESS = """
INSERT INTO gateway_processes (id, server_started_at) VALUES ($1, pg_postmaster_start_time())
ON CONFLICT (id) DO UPDATE SET server_started_at = excluded.server_started_at, locked_at = now()
"""

#: rows of dead processes from earlier server lifetimes (or older than a week) go; a live
#: process's row is never removed
PRUNE_PROCESSES = f"""
DELETE FROM gateway_processes
WHERE (server_started_at <> pg_postmaster_start_time() OR locked_at < now() - interval '7 days')
  AND id NOT IN ({LIVE_PROCESSES})
"""

LOCK_PROCESS = f"SELECT pg_try_advisory_lock({PROCESS_LOCK_CLASS}, $1)"

# Claim one session with unanswered messages whose lease is free, expired, or held by a
# process that is dead (its liveness lock is gone: takeover in seconds, not after the lease).
_CLAIM_SESSION = f"""
UPDATE sessions s
SET turn_owner = $1, turn_lease_until = now() + make_interval(secs => $2), turn_process = $4
WHERE s.id = (
    SELECT id FROM sessions
    WHERE turn_requested_seq > turn_done_seq AND turn_parked_on IS NULL
      AND (turn_lease_until IS NULL OR turn_lease_until < now()
           OR (turn_process IS DISTINCT FROM $4 AND {_dead("turn_process")}))
      AND ($3::text[] IS NULL OR platform = ANY($3))
    ORDER BY last_message_at NULLS FIRST, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
"""

CLAIM_TURN = f"""
{_CLAIM_SESSION}RETURNING s.id, s.platform, s.scope, s.chat_id, s.thread_id, s.turn_done_seq,
          s.turn_requested_seq, s.selected_model, s.status, s.turn_parked_seq
"""

# The claim and the turn's unanswered messages in one round trip (issue 17). The LATERAL
# read runs in the statement's snapshot, which may predate an ingest that committed while the
# claim locked the row (the row lock follows the newest version): the store sees that the
# newest message is missing (seq below ``turn_requested_seq``) and reads the delta again.
CLAIM_TURN_PENDING = f"""
WITH c AS (
{_CLAIM_SESSION}    RETURNING s.id AS claim_session_id, s.platform, s.scope, s.chat_id, s.thread_id,
              s.turn_done_seq, s.turn_requested_seq, s.selected_model, s.status, s.turn_parked_seq
)
SELECT c.*, m.* FROM c LEFT JOIN LATERAL (
    SELECT {MESSAGE_COLUMNS} FROM messages
    WHERE session_id = c.claim_session_id AND seq_no > c.turn_done_seq
    ORDER BY seq_no LIMIT $5
) m ON true
ORDER BY m.seq_no
"""

RENEW_TURN = """
UPDATE sessions SET turn_lease_until = now() + make_interval(secs => $3)
WHERE id = $1 AND turn_owner = $2
RETURNING id
"""

RELEASE_TURN = """
UPDATE sessions SET turn_owner = NULL, turn_lease_until = NULL, turn_process = NULL
WHERE id = $1 AND turn_owner = $2
"""

# The whole end of a turn in ONE statement (issue 17): fenced by the lease (no ``fin`` row,
# nothing written), seq numbers for the replies under the session's row lock, the
# participants (issue 14 §10), the assistant messages and their delivery rows. The first part
# is handed to this process's delivery worker already claimed (status 'sending', its token
# and lease) when nothing of the session is still pending or sending before it, so the send
# needs no claim transaction of its own. ``more``: messages arrived during the run.
FINISH_TURN_OUTBOX = f"""
WITH fin AS (
    UPDATE sessions
    SET last_seq_no = last_seq_no + $3,
        message_count = message_count + $3,
        turn_done_seq = greatest(turn_done_seq, $4),
        turn_owner = NULL,
        turn_lease_until = NULL,
        turn_process = NULL,
        answered = answered OR $5,
        status = CASE WHEN $6 THEN 'closed' ELSE status END,
        closed_at = CASE WHEN $6 THEN now() ELSE closed_at END,
        updated_at = now(),
        last_message_at = CASE WHEN $3 > 0 THEN now() ELSE last_message_at END
    WHERE id = $1 AND turn_owner = $2
    RETURNING last_seq_no, platform, turn_requested_seq > turn_done_seq AS more
), who AS (
    INSERT INTO session_participants (session_id, participant, role, display_name,
                                      last_read_seq)
    SELECT $1, fin.platform || ':' || m.sender_id, 'user', max(m.sender_name), max(m.seq_no)
    FROM fin, messages m
    WHERE m.session_id = $1 AND m.seq_no > $7 AND m.seq_no <= $4
      AND m.role = 'user' AND m.sender_id IS NOT NULL
    GROUP BY fin.platform, m.sender_id
    UNION ALL
    SELECT $1, 'assistant', 'assistant', NULL, fin.last_seq_no FROM fin WHERE $5
    ON CONFLICT (session_id, participant) DO UPDATE SET
        last_read_seq = greatest(session_participants.last_read_seq, excluded.last_read_seq),
        display_name = coalesce(excluded.display_name, session_participants.display_name)
), msg AS (
    INSERT INTO messages (session_id, seq_no, role, content, model, tokens_used, metadata)
    SELECT $1, fin.last_seq_no - $3 + r.ord, r.role, r.content, r.model, r.tokens, r.meta
    FROM fin,
         unnest($8::text[], $9::text[], $10::integer[], $11::jsonb[], $12::text[])
             WITH ORDINALITY AS r(content, model, tokens, meta, role, ord)
    RETURNING id, seq_no
), hand AS (
    SELECT $15::boolean AND NOT EXISTS (
        SELECT 1 FROM deliveries e
        WHERE e.session_id = $1 AND e.status IN ('pending', 'sending')
    ) AS ok
), out AS (
    INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                            kind, part, data,
                            status, attempts, lease_until, claim_token, claim_process,
                            claimed_at)
    SELECT msg.id, $1, msg.seq_no, p.part, $13, $14, p.content, p.kind, p.doc, p.data,
           CASE WHEN hand.ok AND p.i = 1 THEN 'sending' ELSE 'pending' END,
           CASE WHEN hand.ok AND p.i = 1 THEN 1 ELSE 0 END,
           CASE WHEN hand.ok AND p.i = 1 THEN now() + make_interval(secs => $18) END,
           CASE WHEN hand.ok AND p.i = 1 THEN gen_random_uuid() END,
           CASE WHEN hand.ok AND p.i = 1 THEN $19::integer END,
           CASE WHEN hand.ok AND p.i = 1 THEN now() END
    FROM fin
    CROSS JOIN hand
    CROSS JOIN unnest($16::integer[], $17::integer[], $20::text[], $21::text[], $22::jsonb[],
                      $23::bytea[])
        WITH ORDINALITY AS p(ord, part, content, kind, doc, data, i)
    JOIN msg ON msg.seq_no = fin.last_seq_no - $3 + p.ord
    RETURNING {DELIVERY_COLUMNS}
)
SELECT fin.last_seq_no, fin.more, (SELECT count(*) FROM out) AS written, o.*
FROM fin LEFT JOIN out o ON o.status = 'sending'
"""

INSERT_DELIVERIES = """
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                        kind, part, data)
SELECT mid, $1, seq, part, $2, $3, content, kind, doc, data
FROM unnest($4::bigint[], $5::bigint[], $6::integer[], $7::text[], $8::text[], $9::jsonb[],
            $10::bytea[]) AS r(mid, seq, part, content, kind, doc, data)
"""

# A part is claimable only when every earlier part of the same session is sent or failed, so
# parts and replies reach the platform in order even with many workers.
CLAIM_DELIVERIES = """
UPDATE deliveries d
SET status = 'sending', attempts = d.attempts + 1,
    lease_until = now() + make_interval(secs => $1),
    claim_token = gen_random_uuid(), claim_process = $4, claimed_at = now(), pacing_until = NULL
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
          d.content, d.status, d.attempts, d.next_attempt_at, d.last_error,
          d.platform_message_id, d.created_at, d.sent_at, d.claim_token, d.ambiguous,
          d.pacing_until, d.kind, d.part, d.data
"""

# MARK_SENT / MARK_RETRY / MARK_FAILED / RENEW_DELIVERY / MARK_PACING / MARK_ON_WIRE are
# fenced by the claim's token ($2): a worker whose claim was taken over (recovered, requeued,
# claimed again) writes nothing, and learns it from the empty RETURNING.
# ``more``: the session has parts waiting behind this one (a worker should claim now).
MARK_SENT = """
UPDATE deliveries d
SET status = 'sent', platform_message_id = $3, sent_at = now(), lease_until = NULL,
    claim_process = NULL, pacing_until = NULL
WHERE d.id = $1 AND d.status = 'sending' AND d.claim_token = $2
RETURNING d.id, EXISTS (
    SELECT 1 FROM deliveries e
    WHERE e.session_id = d.session_id AND e.status = 'pending' AND e.id <> d.id
) AS more
"""

MARK_RETRY = """
UPDATE deliveries
SET status = 'pending', next_attempt_at = now() + make_interval(secs => $3), last_error = $4,
    lease_until = NULL, claim_process = NULL, pacing_until = NULL
WHERE id = $1 AND status = 'sending' AND claim_token = $2
RETURNING id
"""

MARK_FAILED = """
UPDATE deliveries SET status = 'failed', last_error = $3, lease_until = NULL, ambiguous = $4,
    claim_process = NULL, pacing_until = NULL
WHERE id = $1 AND status = 'sending' AND claim_token = $2
RETURNING id
"""

RENEW_DELIVERY = """
UPDATE deliveries SET lease_until = now() + make_interval(secs => $3)
WHERE id = $1 AND status = 'sending' AND claim_token = $2
RETURNING id
"""

# Issue 12, migration 0014: a claim that has to wait for its chat's pacer says so (only
# then: a send with no wait writes nothing more), and clears it right before the request goes
# out. While it is set nothing of this claim is on the wire, so recovery may resend it on any
# platform. MARK_ON_WIRE also moves claimed_at up: the send begins after it, so a platform's
# idempotency window (Mattermost) is counted from the send, not from the start of the wait.
# A part held off the workers keeps its lease for the whole wait (nothing renews it there):
# a live process's claim is never taken over while it waits; a dead one's is found by its
# process's liveness.
MARK_PACING = """
UPDATE deliveries SET pacing_until = now() + make_interval(secs => $3),
    lease_until = greatest(lease_until, now() + make_interval(secs => $3 + $4))
WHERE id = $1 AND status = 'sending' AND claim_token = $2
RETURNING id
"""

MARK_ON_WIRE = """
UPDATE deliveries SET pacing_until = NULL, claimed_at = now()
WHERE id = $1 AND status = 'sending' AND claim_token = $2
RETURNING id
"""

# A send found in flight by recovery, with nobody left to finish it.
MARK_AMBIGUOUS = """
UPDATE deliveries SET status = 'failed', last_error = $2, lease_until = NULL, ambiguous = true,
    claim_process = NULL, claim_token = NULL, pacing_until = NULL
WHERE id = $1
"""

# Sends whose worker died mid-flight (lease expired, or its process is dead): the platform
# may or may not have the message, unless the claim was still waiting for pacing.
EXPIRED_SENDING = f"""
SELECT id, platform, extract(epoch FROM now() - claimed_at)::float8 AS claim_age,
       pacing_until IS NOT NULL AS pacing
FROM deliveries
WHERE status = 'sending' AND platform = ANY($1)
  AND (lease_until < now()
       OR {_dead("claim_process")})
FOR UPDATE SKIP LOCKED
"""

REQUEUE_DELIVERY = """
UPDATE deliveries SET status = 'pending', next_attempt_at = now(), lease_until = NULL,
    last_error = $2, claim_token = NULL, claim_process = NULL, pacing_until = NULL
WHERE id = $1
"""

RETRY_FAILED_DELIVERY = """
UPDATE deliveries SET status = 'pending', next_attempt_at = now(), attempts = 0,
    ambiguous = false
WHERE id = $1 AND status = 'failed'
RETURNING id
"""

DELIVERIES_FOR_SESSION = f"""
SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE session_id = $1 ORDER BY seq_no, part_no
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
       sm.id AS summary_id, sm.session_id AS summary_session_id,
       sm.from_seq AS summary_from_seq, sm.to_seq AS summary_to_seq,
       sm.content AS summary_content, sm.model AS summary_model,
       sm.model_written AS summary_model_written, sm.created_at AS summary_created_at
FROM sessions s
LEFT JOIN LATERAL (
    SELECT id, session_id, from_seq, to_seq, content, model, model_written, created_at
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
# In ``ContextRecord``'s field order: ``ContextRecord.from_values`` reads them by position.
_CONTEXT_COLUMNS = """
m.id, m.seq_no, m.role,
CASE WHEN m.edited_at IS NULL THEN m.content ELSE coalesce(
    (SELECT a.content FROM message_annotations a
     WHERE a.message_id = m.id AND a.kind = 'edit' AND a.content IS NOT NULL
     ORDER BY a.id DESC LIMIT 1), m.content) END AS content,
m.sender_id, m.sender_name,
(m.metadata->>'answers_seq')::bigint AS answers_seq,
m.metadata->'tool_calls' AS tool_calls,
m.metadata->>'tool_call_id' AS tool_call_id
"""


def _context_filter(session: str, after: str, upto: str) -> str:
    """The context rows of ``session`` with ``after < seq_no <= upto`` (SQL expressions
    written in this module, never values)."""
    return f"""
m.session_id = {session} AND m.seq_no > {after} AND m.seq_no <= {upto}
AND ((m.role = 'user' AND m.command IS NULL)
     OR (m.role <> 'user' AND m.model IS DISTINCT FROM 'command'))
AND NOT EXISTS (SELECT 1 FROM message_annotations d
                WHERE d.message_id = m.id AND d.kind = 'delete')
"""


_CONTEXT_FILTER = _context_filter("$1", "$2", "$3")

CONTEXT_NEWEST_FIRST = f"""
SELECT {_CONTEXT_COLUMNS} FROM messages m WHERE {_CONTEXT_FILTER}
ORDER BY m.seq_no DESC LIMIT $4
"""

CONTEXT_OLDEST_FIRST = f"""
SELECT {_CONTEXT_COLUMNS} FROM messages m WHERE {_CONTEXT_FILTER}
ORDER BY m.seq_no LIMIT $4
"""

# The claim, the turn's unanswered messages, what the turn needs besides the transcript
# (``TURN_STATE``) and the newest page of its context (``CONTEXT_NEWEST_FIRST``), in ONE
# round trip (issue 17). All of it reads the statement's snapshot: ``p`` holds exactly the
# messages the turn will handle (up to ``upto_seq``), the context stops there too. When the
# snapshot missed the newest message (see ``CLAIM_TURN_PENDING``) the store drops the extras
# and the turn reads them again. ``$6``: the page size of the context read.
CLAIM_TURN_CONTEXT = f"""
WITH c AS (
{_CLAIM_SESSION}    RETURNING s.id AS claim_session_id, s.platform, s.scope, s.chat_id, s.thread_id,
              s.turn_done_seq, s.turn_requested_seq, s.selected_model, s.status, s.turn_parked_seq,
              s.metadata AS session_metadata, s.title AS session_title
), p AS (
    SELECT {MESSAGE_COLUMNS} FROM messages
    WHERE session_id = (SELECT claim_session_id FROM c)
      AND seq_no > (SELECT turn_done_seq FROM c)
    ORDER BY seq_no LIMIT $5
), q AS (
    SELECT seq_no, sender_id, metadata FROM p
    WHERE role = 'user' AND trigger = 'answer' AND command IS NULL
    ORDER BY seq_no DESC LIMIT 1
), top AS (
    SELECT max(seq_no) AS upto FROM p
), sm AS (
    SELECT id, session_id, from_seq, to_seq, content, model, model_written, created_at
    FROM session_summaries
    WHERE session_id = (SELECT claim_session_id FROM c) AND to_seq <= (SELECT upto FROM top)
    ORDER BY to_seq DESC, id DESC LIMIT 1
), ctx AS (
    SELECT {_CONTEXT_COLUMNS} FROM messages m
    WHERE {
    _context_filter(
        "(SELECT claim_session_id FROM c)",
        "coalesce((SELECT to_seq FROM sm), 0)",
        "(SELECT upto FROM top)",
    )
}
    ORDER BY m.seq_no DESC LIMIT $6
)
SELECT c.*,
       (SELECT u.model FROM user_model_choices u, q
        WHERE u.platform = c.platform AND u.user_id = q.sender_id) AS user_model,
       (SELECT metadata FROM q) AS place,
       (SELECT seq_no FROM q) AS question_seq,
       (SELECT upto FROM top) AS upto_seq,
       sm.id AS summary_id, sm.session_id AS summary_session_id,
       sm.from_seq AS summary_from_seq, sm.to_seq AS summary_to_seq,
       sm.content AS summary_content, sm.model AS summary_model,
       sm.model_written AS summary_model_written, sm.created_at AS summary_created_at,
       (SELECT jsonb_agg(to_jsonb(ctx) ORDER BY ctx.seq_no DESC) FROM ctx) AS context_page,
       p.*
FROM c LEFT JOIN sm ON true LEFT JOIN p ON true
ORDER BY p.seq_no
"""

LATEST_SUMMARY = f"""
SELECT {SUMMARY_COLUMNS} FROM session_summaries
WHERE session_id = $1 ORDER BY to_seq DESC, id DESC LIMIT 1
"""

LIST_SUMMARIES = f"""
SELECT {SUMMARY_COLUMNS} FROM session_summaries WHERE session_id = $1 ORDER BY to_seq, id
"""

# Written only if it moves the session's summary forward: a replica (or an MCP client) that
# got as far already wins. Two replicas racing on one range may both write it; the newest
# (id) is the one used, and either is correct.
INSERT_ROLLING_SUMMARY = f"""
INSERT INTO session_summaries (session_id, from_seq, to_seq, content, model, model_written)
SELECT $1, $2, $3, $4, $5, $6
WHERE NOT EXISTS (SELECT 1 FROM session_summaries WHERE session_id = $1 AND to_seq >= $3)
RETURNING {SUMMARY_COLUMNS}
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

# --- the operator surface: admin API, MCP session tools, operator pages -------------------

SESSION_COUNTS = """
SELECT count(*) FILTER (WHERE status = 'active') AS active,
       count(*) FILTER (WHERE status = 'closed') AS closed
FROM sessions
"""

# Served from the partial unique index on active sessions.
ACTIVE_SESSION_COUNT = "SELECT count(*) FROM sessions WHERE status = 'active'"

PARTICIPANTS = """
SELECT session_id, participant, role, display_name, last_read_seq, joined_at, metadata
FROM session_participants WHERE session_id = $1 ORDER BY joined_at, participant
"""

CHECKPOINTS = """
SELECT id, session_id, name, status, seq_no, detail, created_at, updated_at
FROM session_checkpoints WHERE session_id = $1 ORDER BY id
"""

LINKS = """
SELECT id, session_id, linked_session_id, relation, url, created_at
FROM session_links WHERE session_id = $1 ORDER BY id
"""

ARTIFACTS = """
SELECT id, session_id, kind, name, uri, content, seq_no, created_at, metadata
FROM session_artifacts WHERE session_id = $1 ORDER BY id
"""

# by message id: the (message_id, part_no) unique index serves it for any status
DELIVERIES_OF_MESSAGES = f"""
SELECT {DELIVERY_COLUMNS} FROM deliveries
WHERE message_id = ANY($1::bigint[]) ORDER BY seq_no, part_no
"""

LIST_DELIVERIES = f"""
SELECT {DELIVERY_COLUMNS} FROM deliveries
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR platform = $2)
  AND ($3::bigint IS NULL OR session_id = $3)
  AND ($4::bigint IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5
"""

GET_DELIVERY = f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE id = $1"

SESSION_DELIVERY_COUNTS = """
SELECT status, count(*) AS n FROM deliveries WHERE session_id = $1 GROUP BY status
"""

# lists leave the raw payload out (it can be large); GET_INBOUND_EVENT has it
LIST_INBOUND_EVENTS = """
SELECT id, platform, event_id, message_key, status, reason, NULL::jsonb AS payload, received_at
FROM inbound_events
WHERE status = $1
  AND ($2::text IS NULL OR platform = $2)
  AND ($3::bigint IS NULL OR id < $3)
ORDER BY id DESC
LIMIT $4
"""

GET_INBOUND_EVENT = """
SELECT id, platform, event_id, message_key, status, reason, payload, received_at
FROM inbound_events WHERE id = $1 AND status <> 'accepted'
"""

INBOUND_COUNTS = """
SELECT status, count(*) AS n FROM inbound_events WHERE status <> 'accepted' GROUP BY status
"""

# 'simple' matches the generated column's configuration, so the GIN index applies;
# websearch_to_tsquery accepts any text (quotes, OR, -word) without syntax errors. Snippets
# use ts_headline's plain mode: its fragment mode drops trailing numbers ("issue 42").
SEARCH_SESSION = """
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
"""

# Across sessions, newest first. Which plan is fast depends on how many messages match, and
# the planner's estimate for a rare word is poor (it walked the whole primary key backwards
# for a word in one message of 20,000): the store counts the matches through the GIN index,
# capped, and picks SEARCH_ALL_FEW (GIN bitmap, then sort the few hits) or SEARCH_ALL_MANY
# (walk messages newest first until `limit` hits: quick when the word is everywhere).
SEARCH_ALL_COUNT = """
SELECT count(*) FROM (
    SELECT 1 FROM messages m, websearch_to_tsquery('simple', $1) AS query
    WHERE m.content_tsv @@ query AND ($2::bigint IS NULL OR m.id < $2)
    LIMIT $3
) AS capped
"""

_SEARCH_ALL = """
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
"""

SEARCH_ALL_MANY = _SEARCH_ALL + "ORDER BY m.id DESC LIMIT $4"

# "+ 0" hides the primary key's order from the planner, so it must filter through the GIN
# index and sort the (few) matches
SEARCH_ALL_FEW = _SEARCH_ALL + "ORDER BY m.id + 0 DESC LIMIT $4"

# --- writes (MCP session tools) ---------------------------------------------------------

# Where a message appended by a participant goes: the target stored at ingest on the
# session's newest user message (thread-exact, never re-derived).
LATEST_USER_TARGET = """
SELECT reply_target FROM messages
WHERE session_id = $1 AND role = 'user' AND reply_target IS NOT NULL
ORDER BY seq_no DESC
LIMIT 1
"""

# Allocates the next seq_no under the session's row lock, as ingest and finish_turn do, so
# seq numbers stay dense whoever appends.
ALLOCATE_SEQ = """
UPDATE sessions
SET last_seq_no = last_seq_no + 1, message_count = message_count + 1,
    last_message_at = now(), updated_at = now()
WHERE id = $1 AND status = 'active'
RETURNING last_seq_no
"""

INSERT_PARTICIPANT_MESSAGE = f"""
INSERT INTO messages (session_id, seq_no, role, sender_id, sender_name, content, model,
                      tokens_used, metadata)
VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8)
RETURNING {MESSAGE_COLUMNS}
"""

UPSERT_PARTICIPANT = """
INSERT INTO session_participants (session_id, participant, role, display_name, last_read_seq)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (session_id, participant) DO UPDATE SET
    last_read_seq = greatest(session_participants.last_read_seq, excluded.last_read_seq),
    display_name = coalesce(excluded.display_name, session_participants.display_name)
RETURNING session_id, participant, role, display_name, last_read_seq, joined_at, metadata
"""

UPSERT_CHECKPOINT = """
INSERT INTO session_checkpoints (session_id, name, status, seq_no, detail)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (session_id, name) DO UPDATE SET
    status = excluded.status,
    seq_no = coalesce(excluded.seq_no, session_checkpoints.seq_no),
    detail = coalesce(excluded.detail, session_checkpoints.detail),
    updated_at = now()
RETURNING id, session_id, name, status, seq_no, detail, created_at, updated_at
"""

INSERT_SUMMARY = f"""
INSERT INTO session_summaries (session_id, from_seq, to_seq, content, model, model_written)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING {SUMMARY_COLUMNS}
"""

INSERT_ARTIFACT = """
INSERT INTO session_artifacts (session_id, kind, name, uri, content, seq_no, metadata)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, session_id, kind, name, uri, content, seq_no, created_at, metadata
"""
