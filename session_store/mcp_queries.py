"""SQL for the MCP server's additions (issue 14 §10): creating a session, batch appends."""

from __future__ import annotations

from session_store.queries import SESSION_COLUMNS

# A session for a place no platform message opened yet (an agent starting a conversation):
# the active session of that key if there is one, else a new one (the partial unique index
# on the active key decides races between two creators).
CREATE_SESSION = f"""
INSERT INTO sessions (platform, scope, chat_id, thread_id, title, kind, metadata)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (platform, scope, chat_id, (coalesce(thread_id, ''))) WHERE status = 'active'
DO NOTHING
RETURNING {SESSION_COLUMNS}
"""

ACTIVE_SESSION = f"""
SELECT {SESSION_COLUMNS} FROM sessions
WHERE platform = $1 AND scope = $2 AND chat_id = $3
  AND coalesce(thread_id, '') = coalesce($4, '') AND status = 'active'
"""

# N seq numbers at once for a batch append (only while the session is active)
ALLOCATE_SEQS = """
UPDATE sessions
SET last_seq_no = last_seq_no + $2, message_count = message_count + $2,
    last_message_at = now(), updated_at = now()
WHERE id = $1 AND status = 'active'
RETURNING last_seq_no
"""
