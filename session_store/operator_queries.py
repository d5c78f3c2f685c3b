"""SQL of the operator surface (admin API, MCP session tools, operator pages): static strings
with ``$n`` parameters. Optional filters are ``($n::type IS NULL OR column = $n)``."""

SESSION_COLUMNS = """
id, platform, scope, chat_id, thread_id, status, title, kind, selected_model, last_seq_no,
message_count, created_at, updated_at, last_message_at, closed_at, metadata
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

GET_SESSION = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"

SESSION_STATUS = "SELECT status FROM sessions WHERE id = $1"

FIND_SESSION_BY_KEY = f"""
SELECT {SESSION_COLUMNS} FROM sessions
WHERE platform = $1 AND scope = $2 AND chat_id = $3
  AND coalesce(thread_id, '') = coalesce($4::text, '')
ORDER BY (status = 'active') DESC, id DESC
LIMIT 1
"""

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

SUMMARIES = """
SELECT id, session_id, from_seq, to_seq, content, model, model_written, created_at
FROM session_summaries WHERE session_id = $1 ORDER BY to_seq DESC, id DESC
"""

ARTIFACTS = """
SELECT id, session_id, kind, name, uri, content, seq_no, created_at, metadata
FROM session_artifacts WHERE session_id = $1 ORDER BY id
"""

MESSAGE_COLUMNS = """
id, session_id, seq_no, role, content, sender_id, sender_name, external_id, command, trigger,
reply_target, model, tokens_used, feedback, edited_at, created_at, metadata
"""

MESSAGES_AFTER = f"""
SELECT {MESSAGE_COLUMNS} FROM messages
WHERE session_id = $1 AND seq_no > $2 ORDER BY seq_no LIMIT $3
"""

# newest first; the caller reverses to seq order
MESSAGES_BEFORE = f"""
SELECT {MESSAGE_COLUMNS} FROM messages
WHERE session_id = $1 AND seq_no < $2 ORDER BY seq_no DESC LIMIT $3
"""

DELIVERY_COLUMNS = """
id, message_id, session_id, seq_no, part_no, platform, target, content, status, attempts,
next_attempt_at, last_error, platform_message_id, created_at, sent_at
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

LIST_INBOUND_EVENTS = """
SELECT id, platform, event_id, message_key, status, reason, payload, received_at
FROM inbound_events
WHERE status = $1
  AND ($2::text IS NULL OR platform = $2)
  AND ($3::bigint IS NULL OR id < $3)
ORDER BY id DESC
LIMIT $4
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

INSERT_SUMMARY = """
INSERT INTO session_summaries (session_id, from_seq, to_seq, content, model, model_written)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, session_id, from_seq, to_seq, content, model, model_written, created_at
"""

INSERT_ARTIFACT = """
INSERT INTO session_artifacts (session_id, kind, name, uri, content, seq_no, metadata)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, session_id, kind, name, uri, content, seq_no, created_at, metadata
"""
