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
