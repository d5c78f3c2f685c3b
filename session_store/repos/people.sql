-- People and their platform accounts, and /link's one-time codes.

-- name: person_of
SELECT person_of($1)

-- name: list_people
SELECT p.id, p.created_at, array_agg(a.account ORDER BY a.account) AS accounts
FROM people p JOIN person_accounts a ON a.person_id = p.id
WHERE p.merged_into IS NULL
GROUP BY p.id ORDER BY p.id

-- name: person_accounts
SELECT account FROM person_accounts WHERE person_id = $1 ORDER BY account

-- name: person_exists
SELECT id FROM people WHERE id = $1 AND merged_into IS NULL

-- name: save_code
-- an account's new code replaces its older ones
WITH gone AS (DELETE FROM link_codes WHERE account = $2 OR expires_at < now())
INSERT INTO link_codes (code, account, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3))

-- name: take_code
-- a code works once, and only before it expires
DELETE FROM link_codes WHERE code = $1 RETURNING account, expires_at > now() AS valid

-- name: lock_people
-- both people locked in id order: two merges at once wait for each other, never deadlock
SELECT id, merged_into FROM people WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE

-- name: move_accounts
UPDATE person_accounts SET person_id = $1, linked_at = now() WHERE person_id = $2

-- name: mark_merged
-- only the locked row: people merged into it earlier keep pointing at it (their accounts
-- moved already), so no row outside the id-ordered locks is written
UPDATE people SET merged_into = $1 WHERE id = $2

-- name: new_person
INSERT INTO people DEFAULT VALUES RETURNING id

-- name: move_account
UPDATE person_accounts SET person_id = $2, linked_at = now() WHERE account = $1

-- name: account_count
SELECT count(*) FROM person_accounts WHERE person_id = $1

-- name: move_model_choice
-- the merged person's model choice, where the one kept has none
INSERT INTO person_model_choices (person_id, model)
SELECT $1, model FROM person_model_choices WHERE person_id = $2
ON CONFLICT (person_id) DO NOTHING
