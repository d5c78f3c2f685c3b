-- Erasure of one person (`gateway people forget`, gateway/people/erasure.py): one row per
-- request, the step it has reached and how far that step got, so that a run killed half way
-- is finished by the next one. Each batch moves `position` in the same transaction as its
-- changes. Once done the row keeps only the counts: the accounts and people are cleared.
CREATE TABLE erasure_jobs (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    person_id   bigint      NOT NULL,
    -- the person and everyone merged into it; their accounts
    people      bigint[]    NOT NULL,
    accounts    text[]      NOT NULL,
    -- inbound, ledger, messages, documents, identity, done
    step        text        NOT NULL DEFAULT 'inbound',
    -- the step's progress: the last id it looked at
    position    bigint      NOT NULL DEFAULT 0,
    -- knowledge-base documents built from their files, found while their messages are erased
    documents   bigint[]    NOT NULL DEFAULT '{}',
    counts      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
-- one open erasure per person
CREATE UNIQUE INDEX erasure_jobs_open ON erasure_jobs (person_id) WHERE finished_at IS NULL;
