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
