-- Web chat accounts and the key that signs their cookies.

-- name: account_columns
id, name, password_hash, created_at, sessions_valid_after

-- name: add
-- a new account, or a new password for an existing one (which signs it out everywhere)
INSERT INTO web_accounts (name, password_hash) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE
    SET password_hash = EXCLUDED.password_hash, sessions_valid_after = now()
RETURNING {{account_columns}}

-- name: get
SELECT {{account_columns}} FROM web_accounts WHERE name = $1

-- name: list
SELECT {{account_columns}} FROM web_accounts ORDER BY name

-- name: remove
DELETE FROM web_accounts WHERE name = $1

-- name: revoke
UPDATE web_accounts SET sessions_valid_after = now() WHERE name = $1

-- name: key_init
INSERT INTO web_auth_keys (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING

-- name: key
SELECT secret FROM web_auth_keys WHERE id = 1

-- name: oidc_lock
-- one first sign-in per subject at a time: two tabs racing make one account, not two
SELECT pg_advisory_xact_lock(hashtextextended('web_oidc:' || $1 || ' ' || $2, 0))

-- name: oidc_account
SELECT {{account_columns}} FROM web_accounts
WHERE id = (SELECT account_id FROM web_oidc_subjects WHERE issuer = $1 AND subject = $2)

-- name: oidc_add_account
-- a new account for a subject, when the name is free
INSERT INTO web_accounts (name, password_hash) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING
RETURNING {{account_columns}}

-- name: oidc_link
INSERT INTO web_oidc_subjects (issuer, subject, account_id) VALUES ($1, $2, $3)
