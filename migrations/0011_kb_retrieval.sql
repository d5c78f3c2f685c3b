-- Issue 15, continued: faster retrieval at 100,000 passages, and operator knowledge bases
-- assigned to chats.

-- Passages keep their word vector (tsvector) inline and their embedding out of line: full
-- text ranks its matches from the heap row alone, and the embedding (read only for the few
-- nearest rows) no longer pushes the word vector into TOAST. Rows already stored keep their
-- layout until they are written again (reindex).
ALTER TABLE kb_chunks ALTER COLUMN tsv SET STORAGE MAIN;

-- Operator knowledge bases assigned to chats: a chat (platform, scope, chat id) searches its
-- threads' documents, its own knowledge base, every base assigned to it, and `default` (unless
-- GATEWAY_KB_DEFAULT=assigned, when `default` too must be assigned).
CREATE TABLE kb_assignments (
    kb_id       bigint      NOT NULL REFERENCES kb_bases (id) ON DELETE CASCADE,
    platform    text        NOT NULL,
    scope       text        NOT NULL,
    chat_id     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform, scope, chat_id, kb_id)
);
CREATE INDEX kb_assignments_kb ON kb_assignments (kb_id);

-- The HNSW index on half-precision vectors: half the size (more of it stays in memory), the
-- same neighbours for a 256-dimension embedder to well within the ranking's tolerance. Needs
-- pgvector 0.7 (halfvec); an older one keeps the full-precision index, and the search uses
-- whichever index is there.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'kb_chunks'
                 AND column_name = 'embedding')
       AND (SELECT string_to_array(extversion, '.')::int[] FROM pg_extension
            WHERE extname = 'vector') >= ARRAY[0, 7] THEN
        ALTER TABLE kb_chunks ALTER COLUMN embedding SET STORAGE EXTERNAL;
        DROP INDEX IF EXISTS kb_chunks_embedding_256;
        CREATE INDEX kb_chunks_embedding_256h ON kb_chunks
            USING hnsw ((embedding::halfvec(256)) halfvec_cosine_ops) WHERE dims = 256;
    END IF;
END
$$;

-- File bytes in PostgreSQL (`content`, the default) or in an S3-compatible bucket
-- (GATEWAY_FILES_S3_URL: `content` is NULL and the object is named by the hash).
ALTER TABLE kb_files ALTER COLUMN content DROP NOT NULL;
ALTER TABLE kb_files ADD COLUMN storage text NOT NULL DEFAULT 'postgres'
    CHECK (storage IN ('postgres', 's3'));
ALTER TABLE kb_files ADD CONSTRAINT kb_files_content_where
    CHECK ((storage = 'postgres') = (content IS NOT NULL));
