"""SQL for the tools area (issue 14): the built-in read tools and approvals."""

from __future__ import annotations

from session_store.queries import SESSION_COLUMNS

# Sessions a person takes part in: they wrote a user message there (same platform and
# scope: a Slack user id means nothing in another workspace).
ASKER_SESSIONS = f"""
SELECT {SESSION_COLUMNS} FROM sessions s
WHERE s.platform = $1 AND s.scope = $2
  AND EXISTS (SELECT 1 FROM messages m
              WHERE m.session_id = s.id AND m.role = 'user' AND m.sender_id = $3)
ORDER BY s.last_message_at DESC NULLS LAST, s.id DESC
LIMIT $4
"""

TAKES_PART = """
SELECT EXISTS (
    SELECT 1 FROM sessions s JOIN messages m ON m.session_id = s.id
    WHERE s.id = $1 AND s.platform = $2 AND s.scope = $3
      AND m.role = 'user' AND m.sender_id = $4
)
"""

# --- approvals -------------------------------------------------------------------------------

APPROVAL_COLUMNS = """
a.id, a.version, a.session_id, a.idempotency_key, a.tool_name, a.arguments, a.owner,
a.approvers, a.status, a.target, a.card_message_id, a.card_retired, a.decided_by,
a.decided_at, a.created_at, a.expires_at,
(SELECT d.platform_message_id FROM deliveries d
 WHERE d.message_id = a.card_message_id AND d.platform_message_id IS NOT NULL
 ORDER BY d.part_no LIMIT 1) AS card_platform_message_id,
(a.status = 'pending' AND a.expires_at <= now()) AS overdue
"""

# One request per idempotency key: a turn that is re-run after a restart asks for the same
# call again and finds the request (and any decision made meanwhile) instead of a new one.
INSERT_APPROVAL = """
INSERT INTO tool_approvals (id, session_id, idempotency_key, tool_name, arguments, owner,
                            approvers, target, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9))
ON CONFLICT (idempotency_key) DO NOTHING
"""

GET_APPROVAL = f"SELECT {APPROVAL_COLUMNS} FROM tool_approvals a WHERE a.id = $1"

GET_APPROVAL_BY_KEY = (
    f"SELECT {APPROVAL_COLUMNS} FROM tool_approvals a WHERE a.idempotency_key = $1"
)

# Optimistic locking: only the version read, only while pending and not expired (an expiry
# racing a click is decided by whichever commits first; the loser sees the new version).
DECIDE_APPROVAL = """
UPDATE tool_approvals
SET status = $3, version = version + 1, decided_by = $4, decided_at = now()
WHERE id = $1 AND version = $2 AND status = 'pending' AND expires_at > now()
RETURNING id
"""

EXPIRE_APPROVAL = """
UPDATE tool_approvals
SET status = 'expired', version = version + 1, decided_at = now()
WHERE id = $1 AND version = $2 AND status = 'pending' AND expires_at <= now()
RETURNING id
"""

OVERDUE_APPROVALS = """
SELECT id, version FROM tool_approvals
WHERE status = 'pending' AND expires_at <= now()
ORDER BY expires_at LIMIT $1
"""

UNRETIRED_APPROVALS = f"""
SELECT {APPROVAL_COLUMNS} FROM tool_approvals a
WHERE a.status <> 'pending' AND NOT a.card_retired
ORDER BY a.decided_at LIMIT $1
"""

# claimed before the platform call, so the click, the turn and the sweeper retire a card once
MARK_CARD_RETIRED = """
UPDATE tool_approvals SET card_retired = true WHERE id = $1 AND NOT card_retired RETURNING id
"""

UNMARK_CARD_RETIRED = "UPDATE tool_approvals SET card_retired = false WHERE id = $1"

LOCK_APPROVAL_CARD = "SELECT card_message_id FROM tool_approvals WHERE id = $1 FOR UPDATE"

SET_CARD_MESSAGE = "UPDATE tool_approvals SET card_message_id = $2 WHERE id = $1"

# The card is a message of the session (seq-numbered, not conversation: model 'command' keeps
# it out of the agent's context) and a delivery row with the request's stored target.
ALLOCATE_CARD_SEQ = """
UPDATE sessions
SET last_seq_no = last_seq_no + 1, message_count = message_count + 1, updated_at = now()
WHERE id = $1
RETURNING last_seq_no
"""

INSERT_CARD_MESSAGE = """
INSERT INTO messages (session_id, seq_no, role, content, model, metadata)
VALUES ($1, $2, 'assistant', $3, 'command', $4)
RETURNING id
"""

INSERT_CARD_DELIVERY = """
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                        kind, part)
VALUES ($1, $2, $3, 1, $4, $5, $6, 'approval_card',
        jsonb_build_object('v', 1, 'approval_id', $7::text))
"""

APPROVAL_STATES = """
SELECT id, status, decided_by, tool_name FROM tool_approvals WHERE id = ANY($1::text[])
"""

# A reaction names the card by its post: the card's delivery holds that platform id.
GET_APPROVAL_BY_CARD = f"""
SELECT {APPROVAL_COLUMNS} FROM tool_approvals a
JOIN deliveries d ON d.message_id = a.card_message_id
WHERE d.platform = $1 AND d.platform_message_id = $2
LIMIT 1
"""

# --- parked turns (migration 0013) -----------------------------------------------------------
# A turn waiting for an approval parks its session instead of holding a worker. Lock order,
# everywhere: the approval row, then the session row. Parking locks the request first and
# parks only while it is still pending and not overdue; a decision (or expiry) updates the
# request, then unparks in a second statement of the same transaction, whose fresh snapshot
# sees a park that committed while the decision waited for the request's row lock. So a
# session is never left parked on a request that is no longer pending.
LOCK_PENDING_APPROVAL = """
SELECT id FROM tool_approvals
WHERE id = $1 AND status = 'pending' AND expires_at > now()
FOR UPDATE
"""

PARK_TURN = """
UPDATE sessions
SET turn_parked_on = $3, turn_parked_seq = $4,
    turn_owner = NULL, turn_lease_until = NULL, turn_process = NULL
WHERE id = $1 AND turn_owner = $2
RETURNING id
"""

UNPARK_TURN = """
UPDATE sessions SET turn_parked_on = NULL
WHERE id = $1 AND turn_parked_on = $2
RETURNING id
"""

APPROVAL_SESSION = "SELECT session_id FROM tool_approvals WHERE id = $1"

# the sweeper's safety net (a request removed by hand, a bug): parked on nothing pending
UNPARK_STRAYS = """
UPDATE sessions s SET turn_parked_on = NULL
WHERE s.turn_parked_on IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM tool_approvals a
                  WHERE a.id = s.turn_parked_on AND a.status = 'pending')
RETURNING s.id
"""
