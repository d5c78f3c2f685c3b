-- Issue 15, the knowledge base: files stored by content hash, documents with their ingest job,
-- chunks searchable by full text and (where the server has pgvector) by embedding, and the
-- citations frozen with each answer.

-- One index per knowledge base, built with one embedding model: its name and dimension are
-- stored so two models never mix in one index (a change re-embeds through the jobs).
CREATE TABLE kb_bases (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL UNIQUE,
    embedding_model text        NOT NULL,
    embedding_dim   integer     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- File bytes by SHA-256, readable by every replica.
CREATE TABLE kb_files (
    sha256      text        PRIMARY KEY,
    size_bytes  bigint      NOT NULL,
    content     bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A document and its ingest job (queued -> parsing -> embedding -> ready, or failed with the
-- reason). The same content in the same knowledge base is one document. Jobs are claimed with
-- FOR UPDATE SKIP LOCKED and a lease, so a crashed worker's job is taken over.
CREATE TABLE kb_documents (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kb_id            bigint      NOT NULL REFERENCES kb_bases (id),
    sha256           text        NOT NULL REFERENCES kb_files (sha256),
    name             text        NOT NULL,
    media_type       text        NOT NULL,
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'parsing', 'embedding', 'ready', 'failed')),
    error            text,
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_expires_at timestamptz,
    pages            integer,
    chunk_count      integer     NOT NULL DEFAULT 0,
    access_count     bigint      NOT NULL DEFAULT 0,
    -- where to announce "ready" / "failed" (a ReplyTarget), for files shared in a thread
    notify_target    jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kb_id, sha256)
);
CREATE INDEX kb_documents_due ON kb_documents (next_attempt_at, id)
    WHERE state IN ('queued', 'parsing', 'embedding');

-- Passages: each keeps its document, page and heading path.
CREATE TABLE kb_chunks (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id  bigint      NOT NULL REFERENCES kb_documents (id) ON DELETE CASCADE,
    kb_id        bigint      NOT NULL REFERENCES kb_bases (id),
    ordinal      integer     NOT NULL,
    page         integer,
    section      text        NOT NULL DEFAULT '',
    content      text        NOT NULL,
    tokens       integer     NOT NULL,
    dims         integer,
    access_count bigint      NOT NULL DEFAULT 0,
    tsv          tsvector GENERATED ALWAYS AS
                 (to_tsvector('english', section || ' ' || content)) STORED,
    UNIQUE (document_id, ordinal)
);
CREATE INDEX kb_chunks_tsv ON kb_chunks USING gin (tsv);
CREATE INDEX kb_chunks_kb ON kb_chunks (kb_id);

-- How many passages of a knowledge base hold each word (lexeme): full-text search matches on
-- the question's rarest words, so its cost stays bounded however common the others are.
CREATE TABLE kb_terms (
    kb_id   bigint  NOT NULL REFERENCES kb_bases (id),
    lexeme  text    NOT NULL,
    ndoc    integer NOT NULL,
    PRIMARY KEY (kb_id, lexeme)
);

-- The vector column and its index only where the server ships pgvector (the embedded
-- PostgreSQL does); elsewhere retrieval is full-text only and start-up and `doctor` say so.
-- The HNSW index covers the built-in 256-dimension embedder; other dimensions are scanned.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'pgvector is available but this role may not create it: full-text retrieval only';
            RETURN;
        END;
        ALTER TABLE kb_chunks ADD COLUMN embedding vector;
        CREATE INDEX kb_chunks_embedding_256 ON kb_chunks
            USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE dims = 256;
    END IF;
END
$$;

-- Citations frozen with the answer: written in the same transaction as the assistant message,
-- from its metadata, and never changed (a deleted document keeps its earlier citations).
CREATE TABLE answer_citations (
    message_id    bigint           NOT NULL REFERENCES messages (id),
    ordinal       integer          NOT NULL,
    document_id   bigint           NOT NULL,
    chunk_id      bigint           NOT NULL,
    document_name text             NOT NULL,
    page          integer,
    section       text             NOT NULL DEFAULT '',
    passage       text             NOT NULL,
    score         double precision NOT NULL,
    created_at    timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, ordinal)
);

CREATE FUNCTION freeze_citations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO answer_citations
        (message_id, ordinal, document_id, chunk_id, document_name, page, section, passage, score)
    SELECT NEW.id, c.ordinal, c.document_id, c.chunk_id, c.document_name, c.page,
           coalesce(c.section, ''), c.passage, c.score
    FROM jsonb_to_recordset(NEW.metadata->'citations') AS c (
        ordinal integer, document_id bigint, chunk_id bigint, document_name text,
        page integer, section text, passage text, score double precision);
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_freeze_citations AFTER INSERT ON messages
    FOR EACH ROW WHEN (jsonb_typeof(NEW.metadata->'citations') = 'array')
    EXECUTE FUNCTION freeze_citations();
