-- Session lifecycle, message kinds and importance.
--
-- A session is active, paused (stores what arrives, answers nothing until resumed), closed,
-- or archived (read-only): active <-> paused, active|paused -> closed -> archived. A paused
-- session is still the open session of its place, so the one-open-session-per-key index
-- covers both. Sessions carry a topic, a priority and tags to find them by.
ALTER TABLE sessions DROP CONSTRAINT sessions_status_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_status_check
    CHECK (status IN ('active', 'paused', 'closed', 'archived'));
ALTER TABLE sessions
    ADD COLUMN topic    text,
    ADD COLUMN priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN tags     text[]   NOT NULL DEFAULT '{}';
DROP INDEX sessions_active_key;
CREATE UNIQUE INDEX sessions_active_key
    ON sessions (platform, scope, chat_id, (coalesce(thread_id, '')))
    WHERE status IN ('active', 'paused');
CREATE INDEX sessions_tags ON sessions USING gin (tags);

-- Every message has a kind (a person's text is chat, the bot's answers answer, tool results
-- tool_result; a decision is marked by /decision or by an agent) and an importance. The
-- warm path reads a session's decisions from a partial index, never by scanning.
ALTER TABLE messages
    ADD COLUMN kind       text     NOT NULL DEFAULT 'chat' CHECK (kind IN (
        'chat', 'proposal', 'review', 'decision', 'summary', 'question', 'answer', 'warning',
        'tool_result')),
    ADD COLUMN importance smallint NOT NULL DEFAULT 0;
CREATE INDEX messages_decisions ON messages (session_id, seq_no) WHERE kind = 'decision';
-- the unresolved checkpoints of a session (not done, not cancelled), read with its decisions
CREATE INDEX session_checkpoints_open ON session_checkpoints (session_id, id)
    WHERE status NOT IN ('done', 'cancelled');
