-- Issue 14: approvals of tools whose policy says confirm = true, as durable workflow state.
-- A request is decided once (optimistic locking on version, only while pending and not
-- expired); the card posted into the thread goes through the outbox (card_message_id is
-- the session message whose delivery carries it) and is retired on any outcome.
CREATE TABLE tool_approvals (
    id              text        PRIMARY KEY,
    version         integer     NOT NULL DEFAULT 1,
    session_id      bigint      NOT NULL REFERENCES sessions (id),
    idempotency_key text        NOT NULL UNIQUE,
    tool_name       text        NOT NULL,
    arguments       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    owner           text        NOT NULL,
    approvers       text[]      NOT NULL DEFAULT '{}',
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    target          jsonb       NOT NULL,
    card_message_id bigint      REFERENCES messages (id),
    card_retired    boolean     NOT NULL DEFAULT false,
    decided_by      text,
    decided_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);

-- the sweeper: pending requests past expiry, and decided ones whose card is not retired yet
CREATE INDEX tool_approvals_open ON tool_approvals (expires_at) WHERE status = 'pending';
CREATE INDEX tool_approvals_unretired ON tool_approvals (decided_at)
    WHERE status <> 'pending' AND NOT card_retired;
