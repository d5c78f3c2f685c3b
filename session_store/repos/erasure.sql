-- One person's data: read for `gateway people export`, erased by `gateway people forget`
-- (gateway/people/erasure.py). A person is a set of accounts, given here as three arrays
-- ($1 platforms, $2 scopes, $3 user ids: one account each) and the accounts themselves ($4).
-- Every scan walks an id range ($5, $6], so a batch reads and writes a bounded number of
-- rows and the next batch starts where it stopped; plain UPDATE/DELETE with WHERE clauses,
-- which work on a table partitioned by time as well.

-- name: their_messages
-- the messages an account of theirs sent, and the questions their schedules asked
SELECT m.id, m.session_id, m.seq_no, m.inbound_event_id, m.role, m.sender_name, m.content,
       m.external_id, m.created_at, m.metadata,
       s.platform, s.scope, s.chat_id, s.thread_id
FROM messages m JOIN sessions s ON s.id = m.session_id
WHERE m.id > $5 AND m.id <= $6
  AND NOT (m.metadata ? 'erased')
  AND (EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[], $3::text[]) AS a (p, sc, u)
               WHERE s.platform = a.p AND s.scope = a.sc AND m.sender_id = a.u)
       OR (m.role = 'system' AND m.metadata ->> 'owner' = ANY ($4::text[])))

-- name: shared_files
-- the files shared with those messages: each attachment, with the knowledge-base document it
-- became (the thread's knowledge base, by the name the turn gave it) and a web voice note's
-- held file
WITH hit AS (
    {{their_messages}}
), files AS (
    -- the thread's knowledge base is named as thread_kb names it (``thread:`` and the
    -- session key written out: a chat's and a thread's ':' and '%' escaped, a scope's '%')
    SELECT h.id AS message_id, a.item,
           'thread:' || replace(replace(h.platform, '%', '%25'), ':', '%3A')
               || ':' || replace(h.scope, '%', '%25')
               || ':' || replace(replace(h.chat_id, '%', '%25'), ':', '%3A')
               || ':' || CASE WHEN coalesce(h.thread_id, '') = '' THEN '-'
                              WHEN h.thread_id = '-' THEN '%2D'
                              ELSE replace(replace(h.thread_id, '%', '%25'), ':', '%3A') END
               AS kb_name
    FROM hit h,
         jsonb_array_elements(CASE WHEN jsonb_typeof(h.metadata -> 'attachments') = 'array'
                                   THEN h.metadata -> 'attachments' ELSE '[]'::jsonb END)
             AS a (item)
)
SELECT f.message_id, f.item ->> 'name' AS name, f.item ->> 'kind' AS kind, d.id AS document_id,
       CASE WHEN f.item ->> 'file_id' ~ '^held:[0-9]+$' AND length(f.item ->> 'file_id') < 24
            THEN substr(f.item ->> 'file_id', 6)::bigint END AS held_file_id
FROM files f
LEFT JOIN kb_bases b ON b.name = f.kb_name
LEFT JOIN kb_documents d
    ON d.kb_id = b.id
   AND d.name = coalesce(f.item ->> 'name',
                         (f.item ->> 'kind') || '-' || coalesce(f.item ->> 'file_id', 'file'))

-- name: last_message_id
SELECT coalesce(max(id), 0) FROM messages

-- name: last_inbound_id
SELECT coalesce(max(id), 0) FROM inbound_events

-- name: last_ledger_id
SELECT coalesce(max(id), 0) FROM usage_ledger

-- name: erase_messages
-- one batch: their messages in ($5, $6] lose their text, sender and metadata (the row and its
-- seq_no stay: history is dense), with what carries the same words: the raw inbound payload,
-- edits, the session's rolling summaries (rebuilt from what is left) and a title taken from
-- their first message; web voice notes kept by the gateway are deleted. $7: the job.
WITH hit AS (
    {{their_messages}}
    FOR UPDATE OF m
), events AS (
    UPDATE inbound_events SET payload = jsonb_build_object('erased', true)
    WHERE id IN (SELECT inbound_event_id FROM hit WHERE inbound_event_id IS NOT NULL)
      AND payload IS DISTINCT FROM jsonb_build_object('erased', true)
    RETURNING id
), notes AS (
    UPDATE message_annotations SET content = NULL, metadata = jsonb_build_object('erased', true)
    WHERE message_id IN (SELECT id FROM hit)
    RETURNING id
), summaries AS (
    DELETE FROM session_summaries WHERE session_id IN (SELECT session_id FROM hit)
    RETURNING id
), rolled AS (
    -- the same summaries kept in the transcript (kind 'rolling')
    UPDATE messages
    SET content = '', metadata = jsonb_build_object('erased', true, 'erased_at', now())
    WHERE session_id IN (SELECT session_id FROM hit) AND kind = 'rolling' AND content <> ''
    RETURNING id
), titles AS (
    UPDATE sessions SET title = NULL
    WHERE id IN (SELECT session_id FROM hit WHERE seq_no = 1) AND title IS NOT NULL
    RETURNING id
), erased AS (
    UPDATE messages m
    SET content = '', sender_id = NULL, sender_name = NULL,
        metadata = jsonb_build_object('erased', true, 'erased_at', now())
    FROM hit WHERE m.id = hit.id
    RETURNING m.id
), traces AS (
    -- the answer to one of them keeps its text but not the retrieval trace, which holds the
    -- question as the knowledge base was asked it
    UPDATE messages a SET metadata = a.metadata - 'retrieval_trace'
    FROM hit
    WHERE a.session_id = hit.session_id AND a.seq_no > hit.seq_no AND a.role = 'assistant'
      AND a.metadata ->> 'answers_seq' = hit.seq_no::text AND a.metadata ? 'retrieval_trace'
    RETURNING a.id
), held AS (
    DELETE FROM held_files WHERE id = ANY ($8::bigint[])
    RETURNING id
), job AS (
    UPDATE erasure_jobs
    SET position = $6,
        documents = ARRAY(SELECT DISTINCT unnest(documents || $9::bigint[])),
        updated_at = now()
    WHERE id = $7
    RETURNING id
)
SELECT (SELECT count(*) FROM erased) AS messages, (SELECT count(*) FROM events) AS payloads,
       (SELECT count(*) FROM notes) AS edits,
       (SELECT count(*) FROM summaries) + (SELECT count(*) FROM rolled) AS summaries,
       (SELECT count(*) FROM held) AS held_files, (SELECT count(*) FROM traces) AS traces,
       (SELECT count(*) FROM job) AS job

-- name: erase_payloads
-- one batch of the inbox ($3, $4] ($1 platforms, $2 user ids, $5 the job): any raw payload
-- of their platform that names them as its sender anywhere inside (Slack and Mattermost
-- `user`/`user_id`, Telegram `from.id`, Matrix `sender`, Discord `author.id`, Teams
-- `from.id` or `from.aadObjectId`), dead letters included, keeps only that it was erased
WITH erased AS (
    UPDATE inbound_events e SET payload = jsonb_build_object('erased', true)
    WHERE e.id > $3 AND e.id <= $4 AND e.payload IS NOT NULL
      AND EXISTS (
        SELECT 1 FROM unnest($1::text[], $2::text[]) AS a (p, u)
        WHERE e.platform = a.p
          AND jsonb_path_exists(
              e.payload,
              '$.** ? (@.user == $u || @.user_id == $u || @.from.id == $u || @.from.id == $n'
              ' || @.sender == $u || @.author.id == $u || @.from.aadObjectId == $u)',
              jsonb_build_object('u', a.u,
                                 'n', CASE WHEN a.u ~ '^-?[0-9]+$' AND length(a.u) < 16
                                      THEN a.u::numeric END)))
    RETURNING e.id
), job AS (
    UPDATE erasure_jobs SET position = $4, updated_at = now() WHERE id = $5 RETURNING id
)
SELECT (SELECT count(*) FROM erased) AS payloads, (SELECT count(*) FROM job) AS job

-- name: erase_ledger
-- one batch of the ledger ($3, $4]: their rows keep cost and tokens for the totals but lose
-- the account ($1) and the person ($2); a row of an account unlinked from them since (now
-- someone else's) keeps its account. $5: the job.
WITH erased AS (
    UPDATE usage_ledger
    SET account = CASE WHEN account = ANY ($1::text[]) THEN NULL ELSE account END,
        person_id = NULL
    WHERE id > $3 AND id <= $4
      AND (account = ANY ($1::text[]) OR person_id = ANY ($2::bigint[]))
    RETURNING id
), job AS (
    UPDATE erasure_jobs SET position = $4, updated_at = now() WHERE id = $5 RETURNING id
)
SELECT (SELECT count(*) FROM erased) AS ledger_rows, (SELECT count(*) FROM job) AS job

-- name: erase_citations
-- passages of their documents quoted in answers' frozen citations
UPDATE answer_citations SET passage = '' WHERE document_id = ANY ($1::bigint[]) AND passage <> ''

-- name: drop_unused_terms
-- words no passage holds any more (the documents' words were counted down, not removed)
DELETE FROM kb_terms WHERE ndoc <= 0

-- name: erase_schedules
DELETE FROM schedules WHERE owner = ANY ($1::text[])

-- name: erase_approvals
-- the arguments of tool calls they were asked to approve (the model's words, often theirs)
UPDATE tool_approvals SET arguments = jsonb_build_object('erased', true)
WHERE owner = ANY ($1::text[]) OR decided_by = ANY ($1::text[])

-- name: erase_feedback
DELETE FROM message_feedback f
USING messages m, sessions s, unnest($1::text[], $2::text[], $3::text[]) AS a (p, sc, u)
WHERE m.id = f.message_id AND s.id = m.session_id
  AND s.platform = a.p AND s.scope = a.sc AND f.user_id = a.u

-- name: erase_model_choices
-- $1 platforms, $2 user ids, $3 people
WITH platform_choice AS (
    DELETE FROM user_model_choices c
    USING unnest($1::text[], $2::text[]) AS a (p, u)
    WHERE c.platform = a.p AND c.user_id = a.u
    RETURNING 1
)
DELETE FROM person_model_choices WHERE person_id = ANY ($3::bigint[])

-- name: erase_notices
DELETE FROM budget_notices WHERE subject = ANY ($1::text[])

-- name: erase_link_codes
DELETE FROM link_codes WHERE account = ANY ($1::text[])

-- name: erase_web_accounts
-- their web chat accounts; OpenID Connect subjects go with them (ON DELETE CASCADE)
DELETE FROM web_accounts WHERE name = ANY ($1::text[])

-- name: erase_people
WITH accounts AS (
    DELETE FROM person_accounts WHERE person_id = ANY ($1::bigint[]) OR account = ANY ($2::text[])
    RETURNING account
), unmerged AS (
    UPDATE people SET merged_into = NULL WHERE id = ANY ($1::bigint[]) RETURNING id
)
SELECT (SELECT count(*) FROM accounts) AS accounts, (SELECT count(*) FROM unmerged) AS people

-- name: delete_people
DELETE FROM people WHERE id = ANY ($1::bigint[])

-- name: their_people
-- the person and everyone merged into it (at any depth)
WITH RECURSIVE tree (id) AS (
    SELECT id FROM people WHERE id = $1
    UNION
    SELECT p.id FROM people p JOIN tree t ON p.merged_into = t.id
)
SELECT array_agg(id ORDER BY id) FROM tree

-- name: open_job
-- the unfinished erasure of this person or of one of these accounts, else a new one
WITH found AS (
    SELECT id FROM erasure_jobs
    WHERE finished_at IS NULL AND (person_id = $1 OR accounts && $3::text[])
    ORDER BY id LIMIT 1
), made AS (
    INSERT INTO erasure_jobs (person_id, people, accounts)
    SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM found)
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT id FROM found UNION ALL SELECT id FROM made

-- name: open_job_of
-- an unfinished erasure that knows this account (its person row may be gone already)
SELECT id FROM erasure_jobs WHERE finished_at IS NULL AND $1 = ANY (accounts) ORDER BY id LIMIT 1

-- name: job
SELECT id, person_id, people, accounts, step, position, documents, counts, started_at
FROM erasure_jobs WHERE id = $1

-- name: advance
-- the next step, from its beginning, with the counts so far
UPDATE erasure_jobs SET step = $2, position = 0, counts = $3, updated_at = now() WHERE id = $1

-- name: save_counts
UPDATE erasure_jobs SET counts = $2, updated_at = now() WHERE id = $1

-- name: finish_job
-- done: only the counts stay (no accounts, no people)
UPDATE erasure_jobs
SET step = 'done', finished_at = now(), updated_at = now(), people = ARRAY[]::bigint[],
    accounts = ARRAY[]::text[], documents = ARRAY[]::bigint[]
WHERE id = $1

-- name: ledger_rows
SELECT id, at, account, place, session_id, message_id, model, kind, prompt_tokens,
       completion_tokens, cost::text AS cost
FROM usage_ledger
WHERE account = ANY ($1::text[]) OR person_id = ANY ($2::bigint[])
ORDER BY id

-- name: schedules
SELECT id, name, platform, scope, chat_id, thread_id, prompt, owner, time_zone, fire_at, cron,
       status, created_at
FROM schedules WHERE owner = ANY ($1::text[]) ORDER BY id

-- name: audit_events
-- events about them (their person) or done by one of their accounts
SELECT id, at, actor, action, object_type, object_id, outcome, reason, surface, details
FROM audit_events
WHERE (object_type = 'person' AND object_id = ANY ($1::text[])) OR actor = ANY ($2::text[])
ORDER BY at, id

-- name: web_accounts
SELECT a.name, a.created_at, array_remove(array_agg(o.issuer || ' ' || o.subject), NULL) AS oidc
FROM web_accounts a LEFT JOIN web_oidc_subjects o ON o.account_id = a.id
WHERE a.name = ANY ($1::text[])
GROUP BY a.id ORDER BY a.name

-- name: document
SELECT d.id, d.name, d.media_type, d.sha256, b.name AS kb, f.storage, f.content
FROM kb_documents d JOIN kb_bases b ON b.id = d.kb_id JOIN kb_files f ON f.sha256 = d.sha256
WHERE d.id = $1

-- name: held_file
SELECT id, name, media_type, content FROM held_files WHERE id = $1

-- name: person_exists
SELECT EXISTS (SELECT 1 FROM people WHERE id = $1 AND merged_into IS NULL)
