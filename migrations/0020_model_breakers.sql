-- Per-model circuit breakers, shared by every replica (gateway/agents/breakers.py). A row is
-- written when a model first fails. failures counts failed requests in a row (any replica);
-- at AGENT_BREAKER_FAILURES the breaker opens until open_until. Past it, the one replica whose
-- update moves open_until forward sends the probe; an answer closes the breaker (failures 0,
-- open_until NULL). The last error stays for the operator pages.
CREATE TABLE model_breakers (
    model         text PRIMARY KEY,
    failures      integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    open_until    timestamptz,
    opened_at     timestamptz,
    last_cause    text,
    last_error    text,
    last_error_at timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
