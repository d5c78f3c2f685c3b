-- The knowledge bases: bases and their assignments to chats, documents and their files, the
-- ingest jobs that parse and embed them, hybrid retrieval (full text and vectors), and the
-- citations an answer keeps.

-- name: has_vector_column
SELECT EXISTS (
    SELECT 1 FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'kb_chunks'
      AND column_name = 'embedding')

-- name: vector_available
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')

-- name: ensure_kb
INSERT INTO kb_bases (name, embedding_model, embedding_dim) VALUES ($1, $2, $3)
ON CONFLICT (name) DO NOTHING

-- name: kb_columns
id, name, embedding_model, embedding_dim, created_at

-- name: get_kb
SELECT {{kb_columns}} FROM kb_bases WHERE name = $1

-- name: get_kb_for_update
SELECT {{kb_columns}} FROM kb_bases WHERE name = $1 FOR UPDATE

-- name: kbs_by_name
SELECT {{kb_columns}} FROM kb_bases WHERE name = ANY($1::text[])

-- name: list_kbs
SELECT {{kb_columns}} FROM kb_bases ORDER BY name

-- name: any_kb
SELECT EXISTS (SELECT 1 FROM kb_bases)

-- name: scope_kbs
-- What a turn in one chat searches: the named bases (the thread's, the chat's, and
-- default when it applies everywhere) and every base assigned to the chat.
SELECT {{kb_columns}} FROM kb_bases WHERE name = ANY($1::text[])
UNION
SELECT b.id, b.name, b.embedding_model, b.embedding_dim, b.created_at
FROM kb_assignments a JOIN kb_bases b ON b.id = a.kb_id
WHERE a.platform = $2 AND a.scope = $3 AND a.chat_id = $4
ORDER BY name

-- name: assign_kb
INSERT INTO kb_assignments (kb_id, platform, scope, chat_id) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING

-- name: unassign_kb
DELETE FROM kb_assignments a USING kb_bases b
WHERE b.id = a.kb_id AND b.name = $1 AND a.platform = $2 AND a.scope = $3 AND a.chat_id = $4

-- name: list_assignments
SELECT b.name AS kb_name, a.platform, a.scope, a.chat_id, a.created_at
FROM kb_assignments a JOIN kb_bases b ON b.id = a.kb_id
WHERE ($1::text IS NULL OR b.name = $1)
ORDER BY b.name, a.platform, a.scope, a.chat_id

-- name: switch_kb_model
-- A new embedding model for a knowledge base: its vectors are dropped (two models never mix
-- in one index) and every document goes back through its ingest job.
UPDATE kb_bases SET embedding_model = $2, embedding_dim = $3 WHERE id = $1
RETURNING {{kb_columns}}

-- name: requeue_kb_documents
UPDATE kb_documents
SET state = 'queued', error = NULL, attempts = 0, next_attempt_at = now(),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE kb_id = $1

-- name: drop_kb_vectors
UPDATE kb_chunks SET embedding = NULL, dims = NULL WHERE kb_id = $1

-- name: insert_file
-- $3 the bytes, or NULL with $4 = 's3' (the object is in the bucket, by hash)
INSERT INTO kb_files (sha256, size_bytes, content, storage) VALUES ($1, $2, $3, $4)
ON CONFLICT (sha256) DO NOTHING

-- name: document_columns
d.id, d.kb_id, b.name AS kb_name, d.sha256, d.name, d.media_type, d.state, d.error,
d.attempts, d.pages, d.chunk_count, d.access_count, d.notify_target, d.created_at,
d.updated_at

-- name: insert_document
INSERT INTO kb_documents (kb_id, sha256, name, media_type, notify_target)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (kb_id, sha256) DO NOTHING
RETURNING id

-- name: find_document
SELECT id, state FROM kb_documents WHERE kb_id = $1 AND sha256 = $2

-- name: retry_failed_document
-- Adding a failed document again is another try.
UPDATE kb_documents
SET state = 'queued', error = NULL, attempts = 0, next_attempt_at = now(), updated_at = now()
WHERE id = $1 AND state = 'failed'

-- name: get_document
SELECT {{document_columns}} FROM kb_documents d JOIN kb_bases b ON b.id = d.kb_id WHERE d.id = $1

-- name: list_documents
SELECT {{document_columns}} FROM kb_documents d JOIN kb_bases b ON b.id = d.kb_id
WHERE ($1::text IS NULL OR b.name = $1)
ORDER BY d.id
LIMIT $2

-- name: delete_document
DELETE FROM kb_documents WHERE id = $1 RETURNING sha256

-- name: delete_unused_file
DELETE FROM kb_files f WHERE f.sha256 = $1
  AND NOT EXISTS (SELECT 1 FROM kb_documents d WHERE d.sha256 = f.sha256)
RETURNING f.storage

-- name: requeue_document
-- A reindex: the text may change, so the summary goes too (written again once ready).
UPDATE kb_documents
SET state = 'queued', error = NULL, attempts = 0, next_attempt_at = now(),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now(),
    summary = NULL, summary_model = NULL, summary_tries = 0, summary_due_at = now(),
    summary_error = NULL
WHERE id = $1

-- name: claim_job
-- Claim the next due job across replicas: a queued one, or one whose worker's lease ran out
-- (a crash mid-job). Each claim counts as a try.
WITH next AS (
    SELECT id FROM kb_documents
    WHERE state IN ('queued', 'parsing', 'embedding') AND next_attempt_at <= now()
      AND (lease_expires_at IS NULL OR lease_expires_at < now())
    ORDER BY next_attempt_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE kb_documents d
    SET state = 'parsing', attempts = d.attempts + 1, lease_owner = $1,
        lease_expires_at = now() + make_interval(secs => $2), updated_at = now()
    FROM next WHERE d.id = next.id
    RETURNING d.*
)
SELECT {{document_columns}}, d.lease_owner, f.content, f.storage, b.embedding_model,
       b.embedding_dim
FROM claimed d JOIN kb_bases b ON b.id = d.kb_id JOIN kb_files f ON f.sha256 = d.sha256

-- name: job_progress
UPDATE kb_documents
SET state = $3, lease_expires_at = now() + make_interval(secs => $4), updated_at = now()
WHERE id = $1 AND lease_owner = $2
RETURNING id

-- name: finish_job
-- Ready, and due its summary from now.
UPDATE kb_documents
SET state = 'ready', error = NULL, pages = $3, chunk_count = $4, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = now(), summary_due_at = now()
WHERE id = $1 AND lease_owner = $2
RETURNING kb_id

-- name: delete_chunks
DELETE FROM kb_chunks WHERE document_id = $1

-- name: add_terms
-- Word statistics, kept with the passages (in lexeme order, so concurrent ingests lock the
-- shared rows in one order): added after a document's passages are written, taken off before
-- they are deleted.
INSERT INTO kb_terms AS t (kb_id, lexeme, ndoc)
SELECT $2, u.lexeme, count(*)
FROM kb_chunks c, unnest(c.tsv) AS u
WHERE c.document_id = $1
GROUP BY u.lexeme
ORDER BY u.lexeme
ON CONFLICT (kb_id, lexeme) DO UPDATE SET ndoc = t.ndoc + excluded.ndoc

-- name: remove_terms
WITH gone AS (
    SELECT u.lexeme, count(*) AS n
    FROM kb_chunks c, unnest(c.tsv) AS u
    WHERE c.document_id = $1
    GROUP BY u.lexeme
), locked AS (
    SELECT t.kb_id, t.lexeme FROM kb_terms t JOIN gone g ON g.lexeme = t.lexeme
    WHERE t.kb_id = $2
    ORDER BY t.lexeme
    FOR UPDATE OF t
)
UPDATE kb_terms t SET ndoc = t.ndoc - g.n
FROM gone g, locked l
WHERE t.kb_id = l.kb_id AND t.lexeme = l.lexeme AND g.lexeme = t.lexeme

-- name: document_kb
-- A removal locks the document's row before the word statistics, the order an ingest's finish
-- takes them in (the other order deadlocks against it).
SELECT kb_id FROM kb_documents WHERE id = $1 FOR UPDATE

-- name: insert_chunks
INSERT INTO kb_chunks (document_id, kb_id, ordinal, page, section, content, tokens)
SELECT $1, $2, x.ordinal, x.page, x.section, x.content, x.tokens
FROM unnest($3::int[], $4::int[], $5::text[], $6::text[], $7::int[])
     AS x(ordinal, page, section, content, tokens)

-- name: insert_chunks_with_vectors
INSERT INTO kb_chunks (document_id, kb_id, ordinal, page, section, content, tokens, dims,
                       embedding)
SELECT $1, $2, x.ordinal, x.page, x.section, x.content, x.tokens, $8, x.embedding::vector
FROM unnest($3::int[], $4::int[], $5::text[], $6::text[], $7::int[], $9::text[])
     AS x(ordinal, page, section, content, tokens, embedding)

-- name: fail_job
-- A failed try: back to queued after $4 seconds, or failed for good ($4 NULL).
UPDATE kb_documents
SET state = CASE WHEN $4::float8 IS NULL THEN 'failed' ELSE 'queued' END,
    error = $3,
    next_attempt_at = now() + make_interval(secs => coalesce($4::float8, 0)),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_owner = $2
RETURNING id

-- name: set_notify
UPDATE kb_documents SET notify_target = $2 WHERE id = $1

-- name: take_notify
-- Whoever takes the notice tells the thread (the turn that waited, or the job worker): once.
UPDATE kb_documents d SET notify_target = NULL
FROM (SELECT id, notify_target FROM kb_documents WHERE id = $1 FOR UPDATE) AS old
WHERE d.id = old.id AND old.notify_target IS NOT NULL AND d.state IN ('ready', 'failed')
RETURNING old.notify_target

-- name: job_counts
SELECT state, count(*)::int AS n FROM kb_documents GROUP BY state

-- name: hit_columns
c.id AS chunk_id, c.document_id, c.page, c.section, c.content, c.ordinal,
d.name AS document_name, b.name AS kb_name

-- name: search_lexical
-- Hybrid retrieval runs two statements, one per ranking, concurrently on two connections,
-- each returning its best $3 candidates with what a hit shows; the ranks are fused by
-- reciprocal rank in KnowledgeStore.search. $1 the knowledge bases searched.
--
-- Full text matches any word of the question, but only on its rarest words (by kb_terms)
-- while their passages number under $4 (the rarest always counts), and ranks at most
-- $5 matches by cover density over all the question's words: a question made of common
-- words cannot make it rank the whole base. The word vectors are kept inline in the heap row
-- (migration 0011), so ranking reads no TOAST.
WITH words AS (
    SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', $2)) AS u
), df AS (
    SELECT w.lexeme, sum(t.ndoc) AS ndoc
    FROM words w JOIN kb_terms t ON t.lexeme = w.lexeme AND t.kb_id = ANY($1::bigint[])
    GROUP BY w.lexeme
    HAVING sum(t.ndoc) > 0
), rare AS (
    SELECT lexeme, sum(ndoc) OVER (ORDER BY ndoc, lexeme) - ndoc AS before FROM df
), q AS (
    SELECT (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery FROM df) AS ranking,
           (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery FROM rare
            WHERE before < $4) AS matching
), matched AS (
    SELECT c.id, c.tsv
    FROM kb_chunks c, q
    WHERE c.kb_id = ANY($1::bigint[]) AND c.tsv @@ q.matching
    LIMIT $5
), lex AS (
    SELECT m.id, ts_rank_cd(m.tsv, q.ranking) AS score
    FROM matched m, q
    ORDER BY score DESC, m.id
    LIMIT $3
)
SELECT l.score::float8 AS score, {{hit_columns}}
FROM lex l
JOIN kb_chunks c ON c.id = l.id
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_bases b ON b.id = c.kb_id
ORDER BY l.score DESC, l.id

-- name: vector_hits
-- what a vector search returns, nearest first, from its candidates (vec)
SELECT (1 - v.distance)::float8 AS score, {{hit_columns}}
FROM vec v
JOIN kb_chunks c ON c.id = v.id
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_bases b ON b.id = c.kb_id
ORDER BY v.distance, v.id

-- name: search_vector_256
-- The built-in embedder's 256 dimensions: the half-precision HNSW expression index (its
-- ORDER BY is the indexed expression, so the index serves it), hnsw.ef_search set per
-- transaction by hnsw_settings. $2 the query vector as text.
WITH vec AS (
    SELECT c.id, c.embedding::halfvec(256) <=> $2::text::halfvec(256) AS distance
    FROM kb_chunks c
    WHERE c.dims = 256 AND c.kb_id = ANY($1::bigint[])
    ORDER BY c.embedding::halfvec(256) <=> $2::text::halfvec(256)
    LIMIT $3
)
{{vector_hits}}

-- name: search_vector_256_full
-- the same on a pgvector older than 0.7 (no halfvec): the full-precision index of 0007
WITH vec AS (
    SELECT c.id, c.embedding::vector(256) <=> $2::text::vector(256) AS distance
    FROM kb_chunks c
    WHERE c.dims = 256 AND c.kb_id = ANY($1::bigint[])
    ORDER BY c.embedding::vector(256) <=> $2::text::vector(256)
    LIMIT $3
)
{{vector_hits}}

-- name: has_halfvec_index
SELECT EXISTS (
    SELECT 1 FROM pg_indexes
    WHERE schemaname = current_schema() AND indexname = 'kb_chunks_embedding_256h')

-- name: search_vector_any
-- Any other dimension (an embeddings server's model): an exact scan of those bases.
WITH vec AS (
    SELECT c.id, c.embedding <=> $2::text::vector AS distance
    FROM kb_chunks c
    WHERE c.dims = $4::int AND c.kb_id = ANY($1::bigint[])
    ORDER BY distance
    LIMIT $3
)
{{vector_hits}}

-- name: hnsw_settings
-- A filtered HNSW scan keeps going (relaxed order) until it found enough rows of the searched
-- bases; ef_search a little over the candidates asked for (40): a larger list costs
-- latency for neighbours that fusion ranks below the top anyway.
SET LOCAL hnsw.iterative_scan = 'relaxed_order'; SET LOCAL hnsw.ef_search = 64

-- name: count_document_access
UPDATE kb_documents d SET access_count = d.access_count + x.n
FROM unnest($1::bigint[], $2::bigint[]) AS x(id, n) WHERE d.id = x.id

-- name: count_chunk_access
UPDATE kb_chunks c SET access_count = c.access_count + x.n
FROM unnest($1::bigint[], $2::bigint[]) AS x(id, n) WHERE c.id = x.id

-- name: citations
-- minutes_of: a cited document that is a session's minutes opens that session
SELECT c.message_id, c.ordinal, c.document_id, c.chunk_id, c.document_name, c.page, c.section,
       c.passage, c.score, c.created_at, m.session_id AS minutes_of
FROM answer_citations c
LEFT JOIN session_minutes m ON m.document_id = c.document_id
WHERE c.message_id = $1 ORDER BY c.ordinal

-- name: document_passages
-- whole documents for a turn: every passage of a document, in order
SELECT c.id AS chunk_id, c.document_id, c.page, c.section, c.content, c.ordinal, c.tokens,
       d.name AS document_name, b.name AS kb_name
FROM kb_chunks c
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_bases b ON b.id = c.kb_id
WHERE c.document_id = ANY($1::bigint[]) AND d.state = 'ready'
ORDER BY array_position($1::bigint[], c.document_id), c.ordinal
