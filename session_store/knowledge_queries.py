"""The knowledge base's SQL (issue 15), as static strings with ``$n`` parameters."""

HAS_VECTOR_COLUMN = """
SELECT EXISTS (
    SELECT 1 FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'kb_chunks'
      AND column_name = 'embedding')
"""

VECTOR_AVAILABLE = "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')"

ENSURE_KB = """
INSERT INTO kb_bases (name, embedding_model, embedding_dim) VALUES ($1, $2, $3)
ON CONFLICT (name) DO NOTHING
"""

KB_COLUMNS = "id, name, embedding_model, embedding_dim, created_at"

GET_KB = f"SELECT {KB_COLUMNS} FROM kb_bases WHERE name = $1"
GET_KB_FOR_UPDATE = f"SELECT {KB_COLUMNS} FROM kb_bases WHERE name = $1 FOR UPDATE"
KBS_BY_NAME = f"SELECT {KB_COLUMNS} FROM kb_bases WHERE name = ANY($1::text[])"
LIST_KBS = f"SELECT {KB_COLUMNS} FROM kb_bases ORDER BY name"
ANY_KB = "SELECT EXISTS (SELECT 1 FROM kb_bases)"

# What a turn in one chat searches: the named bases (the thread's, the chat's, and
# ``default`` when it applies everywhere) and every base assigned to the chat.
SCOPE_KBS = """
SELECT id, name, embedding_model, embedding_dim, created_at
FROM kb_bases WHERE name = ANY($1::text[])
UNION
SELECT b.id, b.name, b.embedding_model, b.embedding_dim, b.created_at
FROM kb_assignments a JOIN kb_bases b ON b.id = a.kb_id
WHERE a.platform = $2 AND a.scope = $3 AND a.chat_id = $4
ORDER BY name
"""

ASSIGN_KB = """
INSERT INTO kb_assignments (kb_id, platform, scope, chat_id) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
"""
UNASSIGN_KB = """
DELETE FROM kb_assignments a USING kb_bases b
WHERE b.id = a.kb_id AND b.name = $1 AND a.platform = $2 AND a.scope = $3 AND a.chat_id = $4
"""
LIST_ASSIGNMENTS = """
SELECT b.name AS kb_name, a.platform, a.scope, a.chat_id, a.created_at
FROM kb_assignments a JOIN kb_bases b ON b.id = a.kb_id
WHERE ($1::text IS NULL OR b.name = $1)
ORDER BY b.name, a.platform, a.scope, a.chat_id
"""

# A new embedding model for a knowledge base: its vectors are dropped (two models never mix
# in one index) and every document goes back through its ingest job.
SWITCH_KB_MODEL = f"""
UPDATE kb_bases SET embedding_model = $2, embedding_dim = $3 WHERE id = $1
RETURNING {KB_COLUMNS}
"""
REQUEUE_KB_DOCUMENTS = """
UPDATE kb_documents
SET state = 'queued', error = NULL, attempts = 0, next_attempt_at = now(),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE kb_id = $1
"""
DROP_KB_VECTORS = "UPDATE kb_chunks SET embedding = NULL, dims = NULL WHERE kb_id = $1"

# ``$3`` the bytes, or NULL with ``$4`` = 's3' (the object is in the bucket, by hash)
INSERT_FILE = """
INSERT INTO kb_files (sha256, size_bytes, content, storage) VALUES ($1, $2, $3, $4)
ON CONFLICT (sha256) DO NOTHING
"""

DOCUMENT_COLUMNS = """
d.id, d.kb_id, b.name AS kb_name, d.sha256, d.name, d.media_type, d.state, d.error,
d.attempts, d.pages, d.chunk_count, d.access_count, d.notify_target, d.created_at,
d.updated_at
"""

INSERT_DOCUMENT = """
INSERT INTO kb_documents (kb_id, sha256, name, media_type, notify_target)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (kb_id, sha256) DO NOTHING
RETURNING id
"""

FIND_DOCUMENT = "SELECT id, state FROM kb_documents WHERE kb_id = $1 AND sha256 = $2"

# Adding a failed document again is another try.
RETRY_FAILED_DOCUMENT = """
UPDATE kb_documents
SET state = 'queued', error = NULL, attempts = 0, next_attempt_at = now(), updated_at = now()
WHERE id = $1 AND state = 'failed'
"""

GET_DOCUMENT = f"""
SELECT {DOCUMENT_COLUMNS} FROM kb_documents d JOIN kb_bases b ON b.id = d.kb_id WHERE d.id = $1
"""

LIST_DOCUMENTS = f"""
SELECT {DOCUMENT_COLUMNS} FROM kb_documents d JOIN kb_bases b ON b.id = d.kb_id
WHERE ($1::text IS NULL OR b.name = $1)
ORDER BY d.id
LIMIT $2
"""

DELETE_DOCUMENT = "DELETE FROM kb_documents WHERE id = $1 RETURNING sha256"
DELETE_UNUSED_FILE = """
DELETE FROM kb_files f WHERE f.sha256 = $1
  AND NOT EXISTS (SELECT 1 FROM kb_documents d WHERE d.sha256 = f.sha256)
RETURNING f.storage
"""

REQUEUE_DOCUMENT = """
UPDATE kb_documents
SET state = 'queued', error = NULL, attempts = 0, next_attempt_at = now(),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1
"""

# Claim the next due job across replicas: a queued one, or one whose worker's lease ran out
# (a crash mid-job). Each claim counts as a try.
CLAIM_JOB = f"""
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
SELECT {DOCUMENT_COLUMNS}, f.content, f.storage, b.embedding_model, b.embedding_dim
FROM claimed d JOIN kb_bases b ON b.id = d.kb_id JOIN kb_files f ON f.sha256 = d.sha256
"""

JOB_PROGRESS = """
UPDATE kb_documents
SET state = $3, lease_expires_at = now() + make_interval(secs => $4), updated_at = now()
WHERE id = $1 AND lease_owner = $2
RETURNING id
"""

FINISH_JOB = """
UPDATE kb_documents
SET state = 'ready', error = NULL, pages = $3, chunk_count = $4, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_owner = $2
RETURNING kb_id
"""

DELETE_CHUNKS = "DELETE FROM kb_chunks WHERE document_id = $1"

# Word statistics, kept with the passages (in lexeme order, so concurrent ingests lock the
# shared rows in one order): added after a document's passages are written, taken off before
# they are deleted.
ADD_TERMS = """
INSERT INTO kb_terms AS t (kb_id, lexeme, ndoc)
SELECT $2, u.lexeme, count(*)
FROM kb_chunks c, unnest(c.tsv) AS u
WHERE c.document_id = $1
GROUP BY u.lexeme
ORDER BY u.lexeme
ON CONFLICT (kb_id, lexeme) DO UPDATE SET ndoc = t.ndoc + excluded.ndoc
"""
REMOVE_TERMS = """
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
"""
DOCUMENT_KB = "SELECT kb_id FROM kb_documents WHERE id = $1"

INSERT_CHUNKS = """
INSERT INTO kb_chunks (document_id, kb_id, ordinal, page, section, content, tokens)
SELECT $1, $2, x.ordinal, x.page, x.section, x.content, x.tokens
FROM unnest($3::int[], $4::int[], $5::text[], $6::text[], $7::int[])
     AS x(ordinal, page, section, content, tokens)
"""

INSERT_CHUNKS_WITH_VECTORS = """
INSERT INTO kb_chunks (document_id, kb_id, ordinal, page, section, content, tokens, dims,
                       embedding)
SELECT $1, $2, x.ordinal, x.page, x.section, x.content, x.tokens, $8, x.embedding::vector
FROM unnest($3::int[], $4::int[], $5::text[], $6::text[], $7::int[], $9::text[])
     AS x(ordinal, page, section, content, tokens, embedding)
"""

# A failed try: back to ``queued`` after ``$4`` seconds, or ``failed`` for good (``$4`` NULL).
FAIL_JOB = """
UPDATE kb_documents
SET state = CASE WHEN $4::float8 IS NULL THEN 'failed' ELSE 'queued' END,
    error = $3,
    next_attempt_at = now() + make_interval(secs => coalesce($4::float8, 0)),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_owner = $2
RETURNING id
"""

SET_NOTIFY = "UPDATE kb_documents SET notify_target = $2 WHERE id = $1"

# Whoever takes the notice tells the thread (the turn that waited, or the job worker): once.
TAKE_NOTIFY = """
UPDATE kb_documents d SET notify_target = NULL
FROM (SELECT id, notify_target FROM kb_documents WHERE id = $1 FOR UPDATE) AS old
WHERE d.id = old.id AND old.notify_target IS NOT NULL AND d.state IN ('ready', 'failed')
RETURNING old.notify_target
"""

JOB_COUNTS = "SELECT state, count(*)::int AS n FROM kb_documents GROUP BY state"

# Hybrid retrieval runs two statements, one per ranking, concurrently on two connections,
# each returning its best ``$3`` candidates with what a hit shows; the ranks are fused by
# reciprocal rank in ``KnowledgeStore.search``. ``$1`` the knowledge bases searched.
#
# Full text matches any word of the question, but only on its rarest words (by ``kb_terms``)
# while their passages number under ``$4`` (the rarest always counts), and ranks at most
# ``$5`` matches by cover density over all the question's words: a question made of common
# words cannot make it rank the whole base. The word vectors are kept inline in the heap row
# (migration 0011), so ranking reads no TOAST.
_HIT_COLUMNS = """
c.id AS chunk_id, c.document_id, c.page, c.section, c.content, c.ordinal,
d.name AS document_name, b.name AS kb_name
"""

SEARCH_LEXICAL = f"""
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
SELECT l.score::float8 AS score, {_HIT_COLUMNS}
FROM lex l
JOIN kb_chunks c ON c.id = l.id
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_bases b ON b.id = c.kb_id
ORDER BY l.score DESC, l.id
"""

# The built-in embedder's 256 dimensions: the half-precision HNSW expression index (its
# ORDER BY is the indexed expression, so the index serves it), ``hnsw.ef_search`` set per
# transaction by ``HNSW_SETTINGS``. ``$2`` the query vector as text.
SEARCH_VECTOR_256 = f"""
WITH vec AS (
    SELECT c.id, c.embedding::halfvec(256) <=> $2::text::halfvec(256) AS distance
    FROM kb_chunks c
    WHERE c.dims = 256 AND c.kb_id = ANY($1::bigint[])
    ORDER BY c.embedding::halfvec(256) <=> $2::text::halfvec(256)
    LIMIT $3
)
SELECT (1 - v.distance)::float8 AS score, {_HIT_COLUMNS}
FROM vec v
JOIN kb_chunks c ON c.id = v.id
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_bases b ON b.id = c.kb_id
ORDER BY v.distance, v.id
"""

# the same on a pgvector older than 0.7 (no halfvec): the full-precision index of 0007
SEARCH_VECTOR_256_FULL = SEARCH_VECTOR_256.replace("halfvec(256)", "vector(256)")

HAS_HALFVEC_INDEX = """
SELECT EXISTS (
    SELECT 1 FROM pg_indexes
    WHERE schemaname = current_schema() AND indexname = 'kb_chunks_embedding_256h')
"""

# Any other dimension (an embeddings server's model): an exact scan of those bases.
SEARCH_VECTOR_ANY = f"""
WITH vec AS (
    SELECT c.id, c.embedding <=> $2::text::vector AS distance
    FROM kb_chunks c
    WHERE c.dims = $4::int AND c.kb_id = ANY($1::bigint[])
    ORDER BY distance
    LIMIT $3
)
SELECT (1 - v.distance)::float8 AS score, {_HIT_COLUMNS}
FROM vec v
JOIN kb_chunks c ON c.id = v.id
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_bases b ON b.id = c.kb_id
ORDER BY v.distance, v.id
"""

# A filtered HNSW scan keeps going (relaxed order) until it found enough rows of the searched
# bases; ``ef_search`` a little over the candidates asked for (40): a larger list costs
# latency for neighbours that fusion ranks below the top anyway.
HNSW_SETTINGS = "SET LOCAL hnsw.iterative_scan = 'relaxed_order'; SET LOCAL hnsw.ef_search = 64"

COUNT_DOCUMENT_ACCESS = """
UPDATE kb_documents d SET access_count = d.access_count + x.n
FROM unnest($1::bigint[], $2::bigint[]) AS x(id, n) WHERE d.id = x.id
"""
COUNT_CHUNK_ACCESS = """
UPDATE kb_chunks c SET access_count = c.access_count + x.n
FROM unnest($1::bigint[], $2::bigint[]) AS x(id, n) WHERE c.id = x.id
"""

CITATIONS = """
SELECT message_id, ordinal, document_id, chunk_id, document_name, page, section, passage,
       score, created_at
FROM answer_citations WHERE message_id = $1 ORDER BY ordinal
"""
