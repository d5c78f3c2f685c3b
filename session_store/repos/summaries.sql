-- Rolling summaries of a session's transcript.

-- name: summary_columns
id, session_id, from_seq, to_seq, content, model, model_written, created_at

-- name: latest_summary
SELECT {{summary_columns}} FROM session_summaries
WHERE session_id = $1 ORDER BY to_seq DESC, id DESC LIMIT 1

-- name: list_summaries
SELECT {{summary_columns}} FROM session_summaries WHERE session_id = $1 ORDER BY to_seq, id

-- name: insert_rolling_summary
-- Written only if it moves the session's summary forward: a replica (or an MCP client) that
-- got as far already wins. Two replicas racing on one range may both write it; the newest
-- (id) is the one used, and either is correct. The same statement keeps the summary in the
-- transcript as a system message of kind 'rolling' (the next seq number, under the session's
-- row lock), which the context never reads back; not in an archived (read-only) session.
WITH s AS (
    INSERT INTO session_summaries (session_id, from_seq, to_seq, content, model, model_written)
    SELECT $1, $2, $3, $4, $5, $6
    WHERE NOT EXISTS (SELECT 1 FROM session_summaries WHERE session_id = $1 AND to_seq >= $3)
    RETURNING {{summary_columns}}
), seq AS (
    UPDATE sessions
    SET last_seq_no = last_seq_no + 1, message_count = message_count + 1, updated_at = now()
    WHERE id = $1 AND status <> 'archived' AND EXISTS (SELECT 1 FROM s)
    RETURNING last_seq_no
), msg AS (
    INSERT INTO messages (session_id, seq_no, role, content, model, kind, metadata)
    SELECT $1, seq.last_seq_no, 'system', $4, $5, 'rolling',
           jsonb_build_object('summary_id', s.id, 'from_seq', $2::bigint, 'to_seq', $3::bigint,
                              'model_written', $6::boolean)
    FROM seq, s
)
SELECT * FROM s

-- name: insert_summary
-- an operator's or MCP client's summary, written whatever exists
INSERT INTO session_summaries (session_id, from_seq, to_seq, content, model, model_written)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING {{summary_columns}}
