-- Web chat sign-in with OpenID Connect (GATEWAY_WEB_AUTH=oidc): which web account a
-- provider's subject is. A subject is unique only within its issuer; the account's name is
-- chosen once, at the first sign-in, and never follows later changes of the person's name at
-- the provider (gateway/http/webauth.py, session_store/accounts.py).
CREATE TABLE web_oidc_subjects (
    issuer      text        NOT NULL,
    subject     text        NOT NULL,
    account_id  bigint      NOT NULL REFERENCES web_accounts (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);
