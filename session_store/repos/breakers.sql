-- Per-model circuit breakers shared by every replica (gateway/agents/breakers.py).

-- name: breaker_columns
model, failures, open_until, opened_at, last_cause, last_error, last_error_at,
coalesce(open_until > now(), false) AS is_open

-- name: read_breaker
SELECT {{breaker_columns}} FROM model_breakers WHERE model = $1

-- name: list_breakers
-- the operator pages: open breakers and models that failed lately, newest error first
SELECT {{breaker_columns}} FROM model_breakers
WHERE open_until IS NOT NULL OR last_error_at > now() - make_interval(secs => $1)
ORDER BY last_error_at DESC NULLS LAST, model

-- name: record_failure
-- One more failed request in a row; the breaker opens (again) at $3 failures, for $4 seconds.
INSERT INTO model_breakers AS b (model, failures, open_until, opened_at, last_cause,
                                 last_error, last_error_at, updated_at)
VALUES ($1, 1, CASE WHEN 1 >= $3 THEN now() + make_interval(secs => $4) END,
        CASE WHEN 1 >= $3 THEN now() END, $2, $5, now(), now())
ON CONFLICT (model) DO UPDATE SET
    failures = b.failures + 1,
    open_until = CASE WHEN b.failures + 1 >= $3 THEN now() + make_interval(secs => $4)
                      ELSE b.open_until END,
    opened_at = CASE WHEN b.failures + 1 >= $3 AND b.open_until IS NULL THEN now()
                     ELSE b.opened_at END,
    last_cause = $2, last_error = $5, last_error_at = now(), updated_at = now()
RETURNING {{breaker_columns}}

-- name: claim_probe
-- An open breaker whose time is up: the one replica whose update moves it forward sends the
-- probe request; the others still see it open.
UPDATE model_breakers SET open_until = now() + make_interval(secs => $2), updated_at = now()
WHERE model = $1 AND open_until IS NOT NULL AND open_until <= now()
RETURNING model

-- name: record_success
UPDATE model_breakers SET failures = 0, open_until = NULL, opened_at = NULL, updated_at = now()
WHERE model = $1 AND (failures > 0 OR open_until IS NOT NULL)
RETURNING opened_at
