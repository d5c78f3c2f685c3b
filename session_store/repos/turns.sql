-- A session's turn: claiming it (a lease fenced by an owner token), what the turn reads
-- besides its messages, and the model it answers with. Includes from elsewhere:
-- message_columns (sessions.sql) and dead_turn_process (the liveness rule, shared with the
-- outbox's recovery).

-- name: turn_due
-- a session whose turn is due and whose lease is free, expired, or held by a process that is
-- dead (its liveness lock is gone: takeover in seconds, not after the lease)
turn_requested_seq > turn_done_seq AND turn_parked_on IS NULL
-- a paused session answers nothing until resumed
AND status <> 'paused'
-- a burst: the thread has not been quiet long enough yet
AND (turn_not_before IS NULL OR turn_not_before <= now())
AND (turn_lease_until IS NULL OR turn_lease_until < now()
     OR (turn_process IS DISTINCT FROM $4 AND {{dead_turn_process}}))
AND ($3::text[] IS NULL OR platform = ANY($3))

-- name: claim_session
-- Claim one session whose turn is due: $5 first, the session whose new message woke this
-- worker, and otherwise the one waiting longest. SKIP LOCKED lets concurrent workers pass over
-- each other's rows; the row lock makes the claim itself atomic. The second look runs only
-- when the first found nothing (coalesce stops at its first value).
--
-- Why $5: with the longest-waiting order alone, two workers woken for sessions A and B could
-- swap them and leave one without a claim. The one woken for A starts its claim before B is
-- committed, finds A locked by the one woken for B (whose claim began after B's commit and
-- took the older A): its snapshot holds nothing else, so it finds nothing, and B waited for
-- the next poll, a second later.
UPDATE sessions s
SET turn_owner = $1, turn_lease_until = now() + make_interval(secs => $2), turn_process = $4
WHERE s.id = coalesce(
    (SELECT id FROM sessions WHERE id = $5 AND {{turn_due}} FOR UPDATE SKIP LOCKED),
    (SELECT id FROM sessions
     WHERE {{turn_due}}
     ORDER BY last_message_at NULLS FIRST, id
     LIMIT 1
     FOR UPDATE SKIP LOCKED)
)

-- name: claim_turn
{{claim_session}}
RETURNING s.id, s.platform, s.scope, s.chat_id, s.thread_id, s.turn_done_seq,
          s.turn_requested_seq, s.selected_model, s.status, s.turn_parked_seq

-- name: claim_turn_pending
-- The claim and the turn's unanswered messages in one round trip. The LATERAL read runs in
-- the statement's snapshot, which may predate an ingest that committed while the claim
-- locked the row (the row lock follows the newest version): the store sees that the newest
-- message is missing (seq below turn_requested_seq) and reads the delta again.
WITH c AS (
    {{claim_session}}
    RETURNING s.id AS claim_session_id, s.platform, s.scope, s.chat_id, s.thread_id,
              s.turn_done_seq, s.turn_requested_seq, s.selected_model, s.status, s.turn_parked_seq
)
SELECT c.*, m.* FROM c LEFT JOIN LATERAL (
    SELECT {{pending_columns}} FROM messages
    WHERE session_id = c.claim_session_id AND seq_no > c.turn_done_seq
    ORDER BY seq_no LIMIT $6
) m ON true
ORDER BY m.seq_no

-- name: claim_turn_context
-- The claim, the turn's unanswered messages, what the turn needs besides the transcript
-- (turn_state) and the newest page of its context (context_newest_first), in ONE round
-- trip. All of it reads the statement's snapshot: p holds exactly the messages the turn will
-- handle (up to upto_seq), the context stops there too. When the snapshot missed the newest
-- message (see claim_turn_pending) the store drops the extras and the turn reads them again.
-- $7: the page size of the context read.
WITH c AS (
    {{claim_session}}
    RETURNING s.id AS claim_session_id, s.platform, s.scope, s.chat_id, s.thread_id,
              s.turn_done_seq, s.turn_requested_seq, s.selected_model, s.status, s.turn_parked_seq,
              s.metadata AS session_metadata, s.title AS session_title
), p AS (
    SELECT {{pending_columns}} FROM messages
    WHERE session_id = (SELECT claim_session_id FROM c)
      AND seq_no > (SELECT turn_done_seq FROM c)
    ORDER BY seq_no LIMIT $6
), q AS (
    SELECT seq_no, sender_id, metadata FROM p
    WHERE role = 'user' AND trigger = 'answer' AND command IS NULL AND NOT deleted
    ORDER BY seq_no DESC LIMIT 1
), top AS (
    SELECT max(seq_no) AS upto FROM p
), sm AS (
    SELECT id, session_id, from_seq, to_seq, content, model, model_written, created_at
    FROM session_summaries
    WHERE session_id = (SELECT claim_session_id FROM c) AND to_seq <= (SELECT upto FROM top)
    ORDER BY to_seq DESC, id DESC LIMIT 1
), ctx AS (
    SELECT {{context_columns}} FROM messages m
    WHERE m.session_id = (SELECT claim_session_id FROM c)
      AND m.seq_no > coalesce((SELECT to_seq FROM sm), 0)
      AND m.seq_no <= (SELECT upto FROM top)
      {{context_rules}}
    ORDER BY m.seq_no DESC LIMIT $7
)
SELECT c.*,
       coalesce(
           (SELECT pm.model FROM person_model_choices pm, person_accounts pa, q
            WHERE pa.account = c.platform || ':' || c.scope || ':' || q.sender_id
              AND pm.person_id = pa.person_id),
           (SELECT u.model FROM user_model_choices u, q
            WHERE u.platform = c.platform AND u.user_id = q.sender_id)) AS user_model,
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

-- name: renew_turn
UPDATE sessions SET turn_lease_until = now() + make_interval(secs => $3)
WHERE id = $1 AND turn_owner = $2
RETURNING id

-- name: release_turn
UPDATE sessions SET turn_owner = NULL, turn_lease_until = NULL, turn_process = NULL
WHERE id = $1 AND turn_owner = $2

-- name: turn_requested_seq
SELECT turn_requested_seq FROM sessions WHERE id = $1

-- name: turn_state
-- Everything a turn needs besides the transcript, in one round trip: the session's metadata
-- and model choice, this person's last choice, where the question was asked (its metadata
-- carries chat/channel names), and the newest summary that ends at or before the turn.
SELECT s.metadata, s.title, s.selected_model,
       coalesce(
           (SELECT pm.model FROM person_model_choices pm, person_accounts pa
            WHERE pa.account = $3 || ':' || s.scope || ':' || $4
              AND pm.person_id = pa.person_id),
           (SELECT u.model FROM user_model_choices u
            WHERE u.platform = $3 AND u.user_id = $4)) AS user_model,
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

-- name: context_columns
-- The agent's view of the transcript: an edited message reads as its newest edit.
-- answers_seq places a reply right after what it answered even when messages that arrived
-- during the run got lower seq numbers than the reply. In ContextRecord's field order: the
-- context page is read by position.
m.id, m.seq_no, m.role,
CASE WHEN m.edited_at IS NULL THEN m.content ELSE coalesce(
    (SELECT a.content FROM message_annotations a
     WHERE a.message_id = m.id AND a.kind = 'edit' AND a.content IS NOT NULL
     ORDER BY a.id DESC LIMIT 1), m.content) END AS content,
m.sender_id, m.sender_name,
(m.metadata->>'answers_seq')::bigint AS answers_seq,
m.metadata->'tool_calls' AS tool_calls,
m.metadata->>'tool_call_id' AS tool_call_id

-- name: context_rules
-- what is conversation: commands and command answers (help, apologies) are not; deleted
-- messages are gone, and so is an answer replaced by the answer to its edited question; a
-- rolling summary's message is not conversation either (the summary itself comes from
-- session_summaries)
AND ((m.role = 'user' AND m.command IS NULL)
     OR (m.role <> 'user' AND m.model IS DISTINCT FROM 'command'))
AND m.kind <> 'rolling'
AND NOT EXISTS (SELECT 1 FROM message_annotations d
                WHERE d.message_id = m.id AND d.kind = 'delete')
-- a request to rewrite an answer (an edited question) is no message of its own: the question
-- it rewrites reads as its newest edit
AND NOT (m.metadata ? 'rewrites')

-- name: context_newest_first
SELECT {{context_columns}} FROM messages m
WHERE m.session_id = $1 AND m.seq_no > $2 AND m.seq_no <= $3
{{context_rules}}
ORDER BY m.seq_no DESC LIMIT $4

-- name: context_oldest_first
SELECT {{context_columns}} FROM messages m
WHERE m.session_id = $1 AND m.seq_no > $2 AND m.seq_no <= $3
{{context_rules}}
ORDER BY m.seq_no LIMIT $4

-- name: set_session_model
UPDATE sessions SET selected_model = $2, updated_at = now() WHERE id = $1

-- name: set_user_model
INSERT INTO user_model_choices (platform, user_id, model) VALUES ($1, $2, $3)
ON CONFLICT (platform, user_id) DO UPDATE SET model = excluded.model, updated_at = now()

-- name: set_person_model
-- the person's choice, for every account of theirs ($1: the account)
INSERT INTO person_model_choices (person_id, model) VALUES (person_of($1), $2)
ON CONFLICT (person_id) DO UPDATE SET model = excluded.model, updated_at = now()

-- name: session_scope
SELECT scope FROM sessions WHERE id = $1

-- name: turn_watch
-- What a running turn looks at while the model writes (about once a second): the newest seq
-- that asked for a turn, and the signal its session row carries (stop, or its question edited
-- or deleted) with the seq it concerns.
SELECT turn_requested_seq, turn_signal, turn_signal_seq FROM sessions WHERE id = $1

-- name: signal_turn
-- Tell the session's running turn to stop, or that message $3 was edited or deleted. Only a
-- session whose turn is running (a lease held) and only about a message not answered yet;
-- the running turn decides whether it concerns what it handles. A stop with no seq concerns
-- whatever runs: the first message not answered yet.
UPDATE sessions
SET turn_signal = $2, turn_signal_seq = coalesce($3, turn_done_seq + 1)
WHERE id = $1 AND turn_owner IS NOT NULL AND turn_lease_until > now()
  AND coalesce($3, turn_done_seq + 1) > turn_done_seq
RETURNING id

-- name: revisions
-- The newest edit or the deletion of each message after $2 of session $1 (a deletion wins):
-- what a turn that starts over on an edited or deleted question answers.
SELECT DISTINCT ON (m.seq_no) m.seq_no, a.kind, a.content
FROM messages m JOIN message_annotations a ON a.message_id = m.id
WHERE m.session_id = $1 AND m.seq_no > $2 AND a.kind IN ('edit', 'delete')
ORDER BY m.seq_no, (a.kind = 'delete') DESC, a.id DESC

-- name: session_of_answer
-- The session whose answer (a delivered part, or a preview while it streams) is platform
-- message $3 in chat $2: where a stop reaction on the bot's message stops the turn.
SELECT session_id FROM stream_previews p JOIN sessions s ON s.id = p.session_id
WHERE s.platform = $1 AND s.chat_id = $2 AND p.platform_message_id = $3
UNION ALL
SELECT session_id FROM deliveries
WHERE platform = $1 AND platform_message_id = $3 AND target->>'chat_id' = $2
LIMIT 1

-- name: take_signal
-- The running turn took the signal it saw (only that one, and only while it holds the lease):
-- a run that starts over does not see it again.
UPDATE sessions SET turn_signal = NULL, turn_signal_seq = NULL
WHERE id = $1 AND turn_owner = $2 AND turn_signal = $3
  AND turn_signal_seq IS NOT DISTINCT FROM $4
