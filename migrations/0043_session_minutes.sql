-- Minutes, rolling summaries as messages, and evidence links.
--
-- A rolling summary (written on the cold path when a turn's context left older turns out) is
-- also kept in the transcript as a message of kind 'rolling', so the history says where the
-- context was folded and what it was folded into. The context never reads it back (the
-- summary itself comes from session_summaries).
ALTER TABLE messages DROP CONSTRAINT messages_kind_check;
ALTER TABLE messages ADD CONSTRAINT messages_kind_check CHECK (kind IN (
    'chat', 'proposal', 'review', 'decision', 'summary', 'question', 'answer', 'warning',
    'tool_result', 'rolling'));

-- A session's minutes: every session that closes is due them once, whatever closed it (/new
-- in the turn's finishing statement, the admin API, MCP, the CLI), in the closing statement's
-- own transaction. A cold-path worker claims the due ones in batches: with the place's
-- profile naming a knowledge base (minutes_kb) it writes the minutes there as a document,
-- else it marks them skipped.
CREATE TABLE session_minutes (
    session_id  bigint      PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    state       text        NOT NULL DEFAULT 'due'
                CHECK (state IN ('due', 'written', 'skipped', 'failed')),
    tries       integer     NOT NULL DEFAULT 0,
    -- when it is due (again); also the claim's lease
    due_at      timestamptz NOT NULL DEFAULT now(),
    kb          text,
    document_id bigint,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_minutes_due ON session_minutes (due_at) WHERE state = 'due';
-- a cited minutes document opens its session
CREATE INDEX session_minutes_document ON session_minutes (document_id)
    WHERE document_id IS NOT NULL;

CREATE FUNCTION session_minutes_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO session_minutes (session_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER sessions_minutes_due AFTER UPDATE OF status ON sessions
    FOR EACH ROW WHEN (NEW.status = 'closed' AND OLD.status IN ('active', 'paused'))
    EXECUTE FUNCTION session_minutes_due();

-- A knowledge-base document an answer cites is linked to the answer's session as evidence,
-- in the statement that stores the answer (the trigger that freezes its citations): no
-- transaction of its own on the hot path. target_ref: kb-document:<document id>.
CREATE OR REPLACE FUNCTION freeze_citations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO answer_citations
        (message_id, ordinal, document_id, chunk_id, document_name, page, section, passage, score)
    SELECT NEW.id, c.ordinal, c.document_id, c.chunk_id, c.document_name, c.page,
           coalesce(c.section, ''), c.passage, c.score
    FROM jsonb_to_recordset(NEW.metadata->'citations') AS c (
        ordinal integer, document_id bigint, chunk_id bigint, document_name text,
        page integer, section text, passage text, score double precision);
    INSERT INTO session_links (session_id, link_type, target_ref, relation)
    SELECT DISTINCT NEW.session_id, 'doc', 'kb-document:' || c.document_id, 'evidence'
    FROM jsonb_to_recordset(NEW.metadata->'citations') AS c (document_id bigint)
    WHERE c.document_id IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM session_links l
          WHERE l.session_id = NEW.session_id AND l.link_type = 'doc'
            AND l.target_ref = 'kb-document:' || c.document_id AND l.relation = 'evidence');
    RETURN NULL;
END
$$;
