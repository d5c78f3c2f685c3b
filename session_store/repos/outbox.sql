-- The outbox: a turn's replies as delivery rows, one per part, claimed by the delivery
-- workers under a lease fenced by a claim token, paced per chat, recovered when their worker
-- died. Fragments passed in by outbox.py: dead_claim_process (the liveness rule,
-- ``session_store.repos.liveness.dead_process``).

-- name: delivery_columns
-- the one column list of DeliveryRecord
id, message_id, session_id, seq_no, part_no, platform, target, content, status, attempts,
next_attempt_at, last_error, platform_message_id, created_at, sent_at, claim_token, ambiguous,
pacing_until, kind, part, data, traceparent

-- name: finish_turn_outbox
-- The whole end of a turn in ONE statement: fenced by the lease (no ``fin`` row, nothing
-- written), seq numbers for the replies under the session's row lock, the participants, the
-- assistant messages and their delivery rows. The first part is handed to this process's
-- delivery worker already claimed (status 'sending', its token and lease) when nothing of the
-- session is still pending or sending before it, so the send needs no claim transaction of its
-- own. ``more``: messages arrived during the run. The handed part's claim token ($34) is the
-- caller's: should the answer to a committed finish be lost, the caller hands back what it
-- claimed (``release_claims``) instead of leaving it claimed under a token nobody holds.
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
    INSERT INTO messages (session_id, seq_no, role, content, model, tokens_used, metadata,
                          kind)
    SELECT $1, fin.last_seq_no - $3 + r.ord, r.role, r.content, r.model, r.tokens, r.meta,
           CASE r.role WHEN 'assistant' THEN 'answer' WHEN 'tool' THEN 'tool_result'
                       ELSE 'chat' END
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
                            claimed_at, traceparent)
    SELECT msg.id, $1, msg.seq_no, p.part, $13, $14, p.content, p.kind, p.doc, p.data,
           CASE WHEN hand.ok AND p.i = 1 THEN 'sending' ELSE 'pending' END,
           CASE WHEN hand.ok AND p.i = 1 THEN 1 ELSE 0 END,
           CASE WHEN hand.ok AND p.i = 1 THEN now() + make_interval(secs => $18) END,
           CASE WHEN hand.ok AND p.i = 1 THEN $34::uuid END,
           CASE WHEN hand.ok AND p.i = 1 THEN $19::integer END,
           CASE WHEN hand.ok AND p.i = 1 THEN now() END,
           $33::text
    FROM fin
    CROSS JOIN hand
    CROSS JOIN unnest($16::integer[], $17::integer[], $20::text[], $21::text[], $22::jsonb[],
                      $23::bytea[])
        WITH ORDINALITY AS p(ord, part, content, kind, doc, data, i)
    JOIN msg ON msg.seq_no = fin.last_seq_no - $3 + p.ord
    RETURNING {{delivery_columns}}
), led AS (
    -- the usage ledger: one row per model call of this turn (people/usage migration 0017),
    -- written with the answer, so charging costs no transaction of its own
    INSERT INTO usage_ledger (account, person_id, place, session_id, message_id, model, kind,
                              prompt_tokens, completion_tokens, cost, price_version)
    SELECT u.account, person_of(u.account), $32, $1, msg.id, u.model, u.kind, u.prompt,
           u.completion, u.cost, u.pv
    FROM fin
    CROSS JOIN unnest($24::text[], $25::integer[], $26::text[], $27::text[], $28::integer[],
                      $29::integer[], $30::numeric[], $31::integer[])
        AS u(account, ord, model, kind, prompt, completion, cost, pv)
    LEFT JOIN msg ON msg.seq_no = fin.last_seq_no - $3 + u.ord
)
SELECT fin.last_seq_no, fin.more, (SELECT count(*) FROM out) AS written, o.*
FROM fin LEFT JOIN out o ON o.status = 'sending'

-- name: insert_deliveries
-- an operator's message (``operator.py``): its parts, pending
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                        kind, part, data)
SELECT mid, $1, seq, part, $2, $3, content, kind, doc, data
FROM unnest($4::bigint[], $5::bigint[], $6::integer[], $7::text[], $8::text[], $9::jsonb[],
            $10::bytea[]) AS r(mid, seq, part, content, kind, doc, data)

-- name: claim_deliveries
-- A part is claimable only when every earlier part of the same session is sent or failed, so
-- parts and replies reach the platform in order even with many workers.
-- The claim token ($5) is the worker's own, so a claim whose answer was lost can be handed back.
UPDATE deliveries d
SET status = 'sending', attempts = d.attempts + 1,
    lease_until = now() + make_interval(secs => $1),
    claim_token = $5::uuid, claim_process = $4, claimed_at = now(), pacing_until = NULL
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
RETURNING {{delivery_columns}}

-- mark_retry / mark_failed and the batched fenced_writes (receipts, renewals, pacing marks)
-- are fenced by the claim's token: a worker whose claim was taken over (recovered, requeued,
-- claimed again) writes nothing, and learns it from the empty RETURNING.
-- name: mark_retry
UPDATE deliveries
SET status = 'pending', next_attempt_at = now() + make_interval(secs => $3), last_error = $4,
    lease_until = NULL, claim_process = NULL, pacing_until = NULL
WHERE id = $1 AND status = 'sending' AND claim_token = $2
RETURNING id

-- name: mark_failed
UPDATE deliveries SET status = 'failed', last_error = $3, lease_until = NULL, ambiguous = $4,
    claim_process = NULL, pacing_until = NULL
WHERE id = $1 AND status = 'sending' AND claim_token = $2
RETURNING id

-- name: fenced_writes
-- Several fenced writes to claimed parts in one statement (one transaction, one WAL flush):
-- the marks, clears, renewals and receipts that a process's delivery workers make at about
-- the same moment (``repos/outbox.py``, ``FencedWrites``). Each row is one of the single
-- writes above, by ``op``: 's' mark_sent (with ``pmid``), 'p' mark_pacing (``wait``,
-- ``lease``), 'w' mark_on_wire, 'r' renew_delivery (``lease``). Every id appears once per
-- statement; a row whose claim was taken over is left alone and missing from RETURNING.
-- Pacing (migration 0014): a claim that has to wait for its chat's pacer or a free worker says
-- so ('p'; only then: a send with no wait writes nothing more), and clears it right before the
-- request goes out ('w', which also moves claimed_at up: a platform's idempotency window, as
-- Mattermost's, counts from the send). While it is set nothing of this claim is on the wire,
-- so recovery may resend it on any platform. A part held off the workers keeps its lease for
-- the whole wait (nothing renews it there): a live process's claim is never taken over while
-- it waits; a dead one's is found by its process's liveness.
-- ``more``: a receipt whose session has parts waiting behind it (a worker should claim now).
UPDATE deliveries d
SET status = CASE WHEN u.op = 's' THEN 'sent' ELSE d.status END,
    platform_message_id = CASE WHEN u.op = 's' THEN u.pmid ELSE d.platform_message_id END,
    sent_at = CASE WHEN u.op = 's' THEN now() ELSE d.sent_at END,
    lease_until = CASE u.op
        WHEN 's' THEN NULL
        WHEN 'p' THEN greatest(d.lease_until, now() + make_interval(secs => u.wait + u.lease))
        WHEN 'r' THEN now() + make_interval(secs => u.lease)
        ELSE d.lease_until END,
    claim_process = CASE WHEN u.op = 's' THEN NULL ELSE d.claim_process END,
    pacing_until = CASE u.op
        WHEN 'p' THEN now() + make_interval(secs => u.wait)
        WHEN 'r' THEN d.pacing_until
        ELSE NULL END,
    claimed_at = CASE WHEN u.op = 'w' THEN now() ELSE d.claimed_at END
FROM unnest($1::text[], $2::bigint[], $3::uuid[], $4::text[], $5::float8[], $6::float8[])
    AS u(op, id, token, pmid, wait, lease)
WHERE d.id = u.id AND d.status = 'sending' AND d.claim_token = u.token
RETURNING d.id, u.op = 's' AND EXISTS (
    SELECT 1 FROM deliveries e
    WHERE e.session_id = d.session_id AND e.status = 'pending' AND e.id <> d.id
) AS more

-- name: expired_sending
-- --- recovery -----------------------------------------------------------------------
-- Sends whose worker died mid-flight (lease expired, or its process is dead): the platform may
-- or may not have the message, unless the claim was still waiting for pacing.
SELECT id, platform, extract(epoch FROM now() - claimed_at)::float8 AS claim_age,
       pacing_until IS NOT NULL AS pacing
FROM deliveries
WHERE status = 'sending' AND platform = ANY($1)
  AND (lease_until < now()
       OR {{dead_claim_process}})
FOR UPDATE SKIP LOCKED

-- name: mark_ambiguous
-- A send found in flight by recovery, with nobody left to finish it.
UPDATE deliveries SET status = 'failed', last_error = $2, lease_until = NULL, ambiguous = true,
    claim_process = NULL, claim_token = NULL, pacing_until = NULL
WHERE id = $1

-- name: requeue_delivery
UPDATE deliveries SET status = 'pending', next_attempt_at = now(), lease_until = NULL,
    last_error = $2, claim_token = NULL, claim_process = NULL, pacing_until = NULL
WHERE id = $1

-- name: release_claims
-- Claims made under these tokens by writes whose answer never came back (committed, then the
-- connection dropped): nothing of them was sent, so they are pending again, at once, their
-- attempt not counted. Found through the small set of sending rows (deliveries_sending).
UPDATE deliveries SET status = 'pending', next_attempt_at = now(),
    attempts = greatest(attempts - 1, 0), last_error = $2, lease_until = NULL,
    claim_token = NULL, claim_process = NULL, pacing_until = NULL
WHERE status = 'sending' AND claim_token = ANY($1::uuid[])
RETURNING id

-- name: retry_failed_delivery
UPDATE deliveries SET status = 'pending', next_attempt_at = now(), attempts = 0,
    ambiguous = false
WHERE id = $1 AND status = 'failed'
RETURNING id

-- name: deliveries_for_session
-- --- reads ----------------------------------------------------------------------------
SELECT {{delivery_columns}} FROM deliveries WHERE session_id = $1 ORDER BY seq_no, part_no

-- name: open_delivery_counts
-- The sets that stay small, exactly, each through its index (deliveries_due,
-- deliveries_sending, deliveries_status); one statement, one snapshot. Sent deliveries grow
-- with the database: sent_delivery_count, then an estimate (session_store.estimates).
SELECT (SELECT count(*) FROM deliveries WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM deliveries WHERE status = 'sending') AS sending,
       (SELECT count(*) FROM deliveries WHERE status = 'failed') AS failed

-- name: sent_delivery_count
-- up to $1 of them, on deliveries_status
SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE status = 'sent' LIMIT $1) AS sent

-- name: sent_deliveries
-- only planned (EXPLAIN), for its row estimate
SELECT 1 FROM deliveries WHERE status = 'sent'

-- name: oldest_pending_age
SELECT extract(epoch FROM now() - min(created_at))::float8 FROM deliveries
WHERE status IN ('pending', 'sending')

-- name: deliveries_of_messages
-- by message id: the (message_id, part_no) unique index serves it for any status
SELECT {{delivery_columns}} FROM deliveries
WHERE message_id = ANY($1::bigint[]) ORDER BY seq_no, part_no

-- name: list_deliveries
-- the operator surface's listing, newest first
SELECT {{delivery_columns}} FROM deliveries
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR platform = $2)
  AND ($3::bigint IS NULL OR session_id = $3)
  AND ($4::bigint IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5

-- name: get_delivery
SELECT {{delivery_columns}} FROM deliveries WHERE id = $1

-- name: session_delivery_counts
SELECT status, count(*) AS n FROM deliveries WHERE session_id = $1 GROUP BY status

-- name: insert_card_delivery
-- an approval card (repos/tools.py, ToolStore.queue_card): a message of the session
-- (seq-numbered, not conversation: model 'command' keeps it out of the agent's context) and a
-- delivery row with the request's stored target
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                        kind, part, traceparent)
VALUES ($1, $2, $3, 1, $4, $5, $6, 'approval_card',
        jsonb_build_object('v', 1, 'approval_id', $7::text), $8)

-- name: answer_parts
-- The text parts of the newest answer in ($2, $3) of a session, in order: the assistant
-- messages of its newest turn that has any (an answer written again edits these in place;
-- an earlier rewrite's edit parts name the same platform messages).
WITH newest AS (
    SELECT max((r.metadata->>'answers_seq')::bigint) AS seq FROM messages r
    WHERE r.session_id = $1 AND r.seq_no > $2 AND r.seq_no < $3 AND r.role = 'assistant'
      AND r.model IS DISTINCT FROM 'command'
      AND EXISTS (SELECT 1 FROM deliveries x
                  WHERE x.message_id = r.id AND x.kind IN ('text', 'edit_message'))
)
SELECT {{delivery_columns}} FROM deliveries
WHERE kind IN ('text', 'edit_message') AND part_no < 10000 AND message_id IN (
    SELECT r.id FROM messages r, newest
    WHERE r.session_id = $1 AND r.seq_no > $2 AND r.seq_no < $3 AND r.role = 'assistant'
      AND (r.metadata->>'answers_seq')::bigint = newest.seq)
ORDER BY seq_no, part_no
