-- People, the usage ledger and budgets.
--
-- A person is one or more platform accounts ('platform:scope:user_id', web 'web:local:NAME').
-- An account gets its person on first sight (person_of). Linking moves accounts from one
-- person to the other, so every sum read by account follows the person the account belongs
-- to now; merged people stay as rows pointing at the one they joined.
CREATE TABLE people (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    merged_into bigint REFERENCES people (id),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE person_accounts (
    account    text        PRIMARY KEY,
    person_id  bigint      NOT NULL REFERENCES people (id),
    linked_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX person_accounts_person ON person_accounts (person_id);

-- /link: a one-time code for the account that asked, valid for ten minutes
CREATE TABLE link_codes (
    code       text        PRIMARY KEY,
    account    text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The person an account belongs to, created on first sight. Each statement in a volatile
-- function takes a fresh snapshot, so an account inserted by a concurrent call is seen after
-- ON CONFLICT waited for it.
CREATE FUNCTION person_of(acct text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    pid bigint;
BEGIN
    IF acct IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT person_id INTO pid FROM person_accounts WHERE account = acct;
    IF pid IS NOT NULL THEN
        RETURN pid;
    END IF;
    INSERT INTO people DEFAULT VALUES RETURNING id INTO pid;
    INSERT INTO person_accounts (account, person_id) VALUES (acct, pid)
    ON CONFLICT (account) DO NOTHING;
    SELECT person_id INTO pid FROM person_accounts WHERE account = acct;
    RETURN pid;
END;
$$;

-- The price sets in force over time: a change of [prices] is a new version; ledger rows keep
-- the version they were priced with.
CREATE TABLE price_sets (
    version    integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    digest     text        NOT NULL,
    prices     jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The usage ledger: one row per model call (answers, tool steps, summaries). account is who
-- is charged (NULL: the place, for summaries); person_id is that account's person when the
-- call was made (sums follow the account's person now).
CREATE TABLE usage_ledger (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                timestamptz NOT NULL DEFAULT now(),
    account           text,
    person_id         bigint,
    place             text        NOT NULL,
    session_id        bigint,
    message_id        bigint,
    model             text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('answer', 'tool_step', 'summary')),
    prompt_tokens     integer     NOT NULL DEFAULT 0,
    completion_tokens integer     NOT NULL DEFAULT 0,
    cost              numeric,
    price_version     integer
);
CREATE INDEX usage_ledger_at ON usage_ledger (at);
CREATE INDEX usage_ledger_account_at ON usage_ledger (account, at);
CREATE INDEX usage_ledger_place_at ON usage_ledger (place, at);

-- Over budget, the asker is told once per limit, subject (person or place) and period.
CREATE TABLE budget_notices (
    limit_name   text        NOT NULL,
    subject      text        NOT NULL,
    place        text        NOT NULL,
    period_start timestamptz NOT NULL,
    noticed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (limit_name, subject, place, period_start)
);

-- The model a person chose with /model, for every account of theirs (the older
-- user_model_choices stays the answer for an account whose person chose nothing).
CREATE TABLE person_model_choices (
    person_id  bigint      PRIMARY KEY REFERENCES people (id),
    model      text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
