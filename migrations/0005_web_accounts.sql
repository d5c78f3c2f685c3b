-- Web chat identity (issue 13): accounts for GATEWAY_WEB_AUTH=accounts, and the key that signs
-- their session cookies (one row, shared by every replica).

-- A person who may sign in to the web chat. password_hash is an argon2id PHC string;
-- sessions_valid_after revokes every cookie issued before it (sign-out, removal).
CREATE TABLE web_accounts (
    id                    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                  text        NOT NULL UNIQUE,
    password_hash         text        NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    sessions_valid_after  timestamptz NOT NULL DEFAULT now()
);

-- The HMAC key of session cookies, made on first use.
CREATE TABLE web_auth_keys (
    id          smallint    PRIMARY KEY CHECK (id = 1),
    secret      bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
