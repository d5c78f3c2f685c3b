-- Documents' summaries: claimed across replicas, written once, read for whole-document answers.

-- name: claim_summary
-- The next ready document due a summary, across replicas: its due time moves a lease ahead
-- (a worker that dies leaves it to the next claim after that) and the claim counts a try.
-- $1 the lease in seconds. The filter is the partial index's (3: the tries).
WITH next AS (
    SELECT id FROM kb_documents
    WHERE state = 'ready' AND summary IS NULL AND summary_tries < 3 AND summary_due_at <= now()
    ORDER BY summary_due_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE kb_documents d
SET summary_tries = d.summary_tries + 1, summary_due_at = now() + make_interval(secs => $1)
FROM next, kb_bases b
WHERE d.id = next.id AND b.id = d.kb_id
RETURNING d.id, d.name, b.name AS kb_name, d.notify_target, d.summary_tries AS tries

-- name: save_summary
-- The first summary stored wins (two workers after a lease ran out write one).
UPDATE kb_documents SET summary = $2, summary_model = $3, summary_error = NULL
WHERE id = $1 AND summary IS NULL AND state = 'ready'
RETURNING id

-- name: fail_summary
-- A failed try: due again after $3 seconds (the claim counts the tries; after the last one
-- the document keeps no summary and its error says why).
UPDATE kb_documents SET summary_error = $2, summary_due_at = now() + make_interval(secs => $3)
WHERE id = $1 AND summary IS NULL

-- name: summaries_of
SELECT id, summary FROM kb_documents WHERE id = ANY($1::bigint[]) AND summary IS NOT NULL

-- name: summary_state
SELECT summary, summary_model, summary_tries, summary_error FROM kb_documents WHERE id = $1
