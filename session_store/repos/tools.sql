-- The tools area: the built-in read tools (which sessions a person takes part in) and tool
-- approvals, with the turns parked on them. The approval card's delivery row is written by the
-- outbox's SQL (insert_card_delivery in outbox.sql). Includes from elsewhere: session_columns
-- (repos/sessions.sql).

-- name: my_accounts
-- The accounts of the person ($1 $2 $3 is one of them: platform, scope, user id), each
-- as (platform, scope, user id); an account not linked yet is a person of its own
WITH me AS (
    SELECT $1 || ':' || $2 || ':' || $3 AS account
), mine AS (
    SELECT a.account FROM person_accounts a
    WHERE a.person_id = (SELECT p.person_id FROM person_accounts p, me
                         WHERE p.account = me.account)
    UNION SELECT account FROM me
)
SELECT account FROM mine

-- name: asker_sessions
-- Sessions a person takes part in: one of their accounts wrote a user message there (an
-- account is platform, scope and user id: a Slack user id means nothing in another
-- workspace).
WITH mine AS ({{my_accounts}})
SELECT {{session_columns}} FROM sessions s
WHERE EXISTS (SELECT 1 FROM messages m
              WHERE m.session_id = s.id AND m.role = 'user' AND m.sender_id IS NOT NULL
                AND s.platform || ':' || s.scope || ':' || m.sender_id
                    IN (SELECT account FROM mine))
ORDER BY s.last_message_at DESC NULLS LAST, s.id DESC
LIMIT $4

-- name: takes_part
-- the person ($2 $3 $4: one of their accounts) wrote in session $1 from any of their accounts
WITH mine AS (
    SELECT a.account FROM person_accounts a
    WHERE a.person_id = (SELECT p.person_id FROM person_accounts p
                         WHERE p.account = $2 || ':' || $3 || ':' || $4)
    UNION SELECT $2 || ':' || $3 || ':' || $4
)
SELECT EXISTS (
    SELECT 1 FROM sessions s JOIN messages m ON m.session_id = s.id
    WHERE s.id = $1 AND m.role = 'user' AND m.sender_id IS NOT NULL
      AND s.platform || ':' || s.scope || ':' || m.sender_id IN (SELECT account FROM mine)
)

-- name: approval_columns
a.id, a.version, a.session_id, a.idempotency_key, a.tool_name, a.arguments, a.owner,
a.approvers, a.status, a.target, a.card_message_id, a.card_retired, a.decided_by,
a.decided_at, a.created_at, a.expires_at,
(SELECT d.platform_message_id FROM deliveries d
 WHERE d.message_id = a.card_message_id AND d.platform_message_id IS NOT NULL
 ORDER BY d.part_no LIMIT 1) AS card_platform_message_id,
(a.status = 'pending' AND a.expires_at <= now()) AS overdue

-- name: insert_approval
-- One request per idempotency key: a turn that is re-run after a restart asks for the same
-- call again and finds the request (and any decision made meanwhile) instead of a new one.
INSERT INTO tool_approvals (id, session_id, idempotency_key, tool_name, arguments, owner,
                            approvers, target, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9))
ON CONFLICT (idempotency_key) DO NOTHING

-- name: get_approval
SELECT {{approval_columns}} FROM tool_approvals a WHERE a.id = $1

-- name: get_approval_by_key
SELECT {{approval_columns}} FROM tool_approvals a WHERE a.idempotency_key = $1

-- name: decide_approval
-- Optimistic locking: only the version read, only while pending and not expired (an expiry
-- racing a click is decided by whichever commits first; the loser sees the new version).
UPDATE tool_approvals
SET status = $3, version = version + 1, decided_by = $4, decided_at = now()
WHERE id = $1 AND version = $2 AND status = 'pending' AND expires_at > now()
RETURNING id

-- name: expire_approval
UPDATE tool_approvals
SET status = 'expired', version = version + 1, decided_at = now()
WHERE id = $1 AND version = $2 AND status = 'pending' AND expires_at <= now()
RETURNING id

-- name: overdue_approvals
SELECT id, version FROM tool_approvals
WHERE status = 'pending' AND expires_at <= now()
ORDER BY expires_at LIMIT $1

-- name: unretired_approvals
SELECT {{approval_columns}} FROM tool_approvals a
WHERE a.status <> 'pending' AND NOT a.card_retired
ORDER BY a.decided_at LIMIT $1

-- name: mark_card_retired
-- claimed before the platform call, so the click, the turn and the sweeper retire a card once
UPDATE tool_approvals SET card_retired = true WHERE id = $1 AND NOT card_retired RETURNING id

-- name: unmark_card_retired
UPDATE tool_approvals SET card_retired = false WHERE id = $1

-- name: lock_approval_card
SELECT card_message_id FROM tool_approvals WHERE id = $1 FOR UPDATE

-- name: set_card_message
UPDATE tool_approvals SET card_message_id = $2 WHERE id = $1

-- name: allocate_card_seq
-- The card is a message of the session (seq-numbered, not conversation: model 'command' keeps
-- it out of the agent's context) and a delivery row with the request's stored target.
UPDATE sessions
SET last_seq_no = last_seq_no + 1, message_count = message_count + 1, updated_at = now()
WHERE id = $1
RETURNING last_seq_no

-- name: insert_card_message
INSERT INTO messages (session_id, seq_no, role, content, model, metadata)
VALUES ($1, $2, 'assistant', $3, 'command', $4)
RETURNING id

-- name: approval_states
SELECT id, status, decided_by, tool_name FROM tool_approvals WHERE id = ANY($1::text[])

-- name: get_approval_by_card
-- A reaction names the card by its post: the card's delivery holds that platform id.
SELECT {{approval_columns}} FROM tool_approvals a
JOIN deliveries d ON d.message_id = a.card_message_id
WHERE d.platform = $1 AND d.platform_message_id = $2
LIMIT 1

-- name: lock_pending_approval
-- Parked turns (migration 0013). A turn waiting for an approval parks its session instead
-- of holding a worker. Lock order, everywhere: the approval row, then the session row. Parking locks the request first and
-- parks only while it is still pending and not overdue; a decision (or expiry) updates the
-- request, then unparks in a second statement of the same transaction, whose fresh snapshot
-- sees a park that committed while the decision waited for the request's row lock. So a
-- session is never left parked on a request that is no longer pending.
SELECT id FROM tool_approvals
WHERE id = $1 AND status = 'pending' AND expires_at > now()
FOR UPDATE

-- name: park_turn
UPDATE sessions
SET turn_parked_on = $3, turn_parked_seq = $4,
    turn_owner = NULL, turn_lease_until = NULL, turn_process = NULL
WHERE id = $1 AND turn_owner = $2
RETURNING id

-- name: unpark_turn
UPDATE sessions SET turn_parked_on = NULL
WHERE id = $1 AND turn_parked_on = $2
RETURNING id

-- name: approval_session
SELECT session_id FROM tool_approvals WHERE id = $1

-- name: unpark_strays
-- the sweeper's safety net (a request removed by hand, a bug): parked on nothing pending
UPDATE sessions s SET turn_parked_on = NULL
WHERE s.turn_parked_on IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM tool_approvals a
                  WHERE a.id = s.turn_parked_on AND a.status = 'pending')
RETURNING s.id
