-- The usage ledger, price sets, and what budgets read. A person's sums follow the accounts
-- that belong to the person now (a merge brings its history along).

-- name: price_lock
SELECT pg_advisory_xact_lock(hashtext('gateway.price_sets'))

-- name: latest_price_set
SELECT version, digest FROM price_sets ORDER BY version DESC LIMIT 1

-- name: add_price_set
INSERT INTO price_sets (digest, prices) VALUES ($1, $2::jsonb) RETURNING version

-- name: ledger_sums
-- cost, tokens and answers of ledger rows matching the filter (a CTE below pastes it)
coalesce(sum(cost), 0) AS cost,
coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint AS tokens,
count(*) FILTER (WHERE kind = 'answer') AS answers

-- name: budget_state
-- Everything a budget check reads, in one statement: the asker's person ($1 is the account)
-- today ($3) and this month ($4), the place ($2) and everything this month, and the turns
-- running right now in each scope (the reservation: a session whose turn is claimed, other
-- than this one ($5)). Read-only.
WITH me AS (
    SELECT (SELECT person_id FROM person_accounts WHERE account = $1) AS pid
), mine AS (
    SELECT account FROM person_accounts WHERE person_id = (SELECT pid FROM me)
    UNION SELECT $1 WHERE $1 IS NOT NULL
), pd AS (
    SELECT {{ledger_sums}} FROM usage_ledger
    WHERE account IN (SELECT account FROM mine) AND at >= $3
), pm AS (
    SELECT {{ledger_sums}} FROM usage_ledger
    WHERE account IN (SELECT account FROM mine) AND at >= $4
), lm AS (
    SELECT {{ledger_sums}} FROM usage_ledger WHERE place = $2 AND at >= $4
), tm AS (
    SELECT {{ledger_sums}} FROM usage_ledger WHERE at >= $4
), run AS (
    -- the place as place_of writes it ($2): a chat's ':' and '%' escaped (a Matrix room
    -- !abc:example.org, a Teams chat 19:abc@thread.v2), a scope's '%' only
    SELECT replace(replace(s.platform, '%', '%25'), ':', '%3A')
           || ':' || replace(s.scope, '%', '%25')
           || ':' || replace(replace(s.chat_id, '%', '%25'), ':', '%3A') AS place,
           EXISTS (
               SELECT 1 FROM messages m
               WHERE m.session_id = s.id AND m.seq_no > s.turn_done_seq
                 AND m.role = 'user' AND m.sender_id IS NOT NULL
                 AND s.platform || ':' || s.scope || ':' || m.sender_id IN (SELECT account FROM mine)
           ) AS mine
    FROM sessions s
    WHERE s.turn_owner IS NOT NULL AND s.turn_lease_until > now() AND s.id <> $5
)
SELECT (SELECT pid FROM me) AS person_id,
       pd.cost AS person_day_cost, pd.tokens AS person_day_tokens,
       pd.answers AS person_day_answers,
       pm.cost AS person_month_cost, pm.tokens AS person_month_tokens,
       lm.cost AS place_month_cost, lm.tokens AS place_month_tokens,
       lm.answers AS place_month_answers,
       tm.cost AS total_month_cost, tm.tokens AS total_month_tokens,
       tm.answers AS total_month_answers,
       (SELECT count(*) FROM run WHERE mine) AS person_running,
       (SELECT count(*) FROM run WHERE place = $2) AS place_running,
       (SELECT count(*) FROM run) AS total_running
FROM pd, pm, lm, tm

-- name: notice_once
-- true the first time this limit is noticed for this subject, thread (the place column holds
-- platform:scope:chat[:thread]) and period
INSERT INTO budget_notices (limit_name, subject, place, period_start)
VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING true

-- name: report
-- the ledger between $2 and $3 grouped by $1: person, place, model or day
SELECT CASE $1
           WHEN 'person' THEN coalesce('person:' || pa.person_id::text, 'place (summaries)')
           WHEN 'place' THEN u.place
           WHEN 'model' THEN u.model
           ELSE to_char(u.at AT TIME ZONE 'UTC', 'YYYY-MM-DD')
       END AS key,
       sum(u.cost) AS cost,
       sum(u.prompt_tokens)::bigint AS prompt_tokens,
       sum(u.completion_tokens)::bigint AS completion_tokens,
       count(*) AS calls,
       array_agg(DISTINCT u.account) FILTER (WHERE u.account IS NOT NULL) AS accounts
FROM usage_ledger u
LEFT JOIN person_accounts pa ON pa.account = u.account
WHERE u.at >= $2 AND u.at < $3
GROUP BY 1
ORDER BY 1

-- name: add_usage
-- one model call outside a turn's answer (a summary), charged to the place
INSERT INTO usage_ledger (account, person_id, place, session_id, message_id, model, kind,
                          prompt_tokens, completion_tokens, cost, price_version)
VALUES ($1, person_of($1), $2, $3, $4, $5, $6, $7, $8, $9, $10)

-- name: ledger_rows
SELECT id, at, account, person_id, place, session_id, message_id, model, kind,
       prompt_tokens, completion_tokens, cost, price_version
FROM usage_ledger WHERE session_id = $1 ORDER BY id
