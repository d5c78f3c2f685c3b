-- Whole documents for a turn: every passage of a document, in order.

-- name: document_passages
SELECT c.id AS chunk_id, c.document_id, c.page, c.section, c.content, c.ordinal, c.tokens,
       d.name AS document_name, b.name AS kb_name
FROM kb_chunks c
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_bases b ON b.id = c.kb_id
WHERE c.document_id = ANY($1::bigint[]) AND d.state = 'ready'
ORDER BY array_position($1::bigint[], c.document_id), c.ordinal
