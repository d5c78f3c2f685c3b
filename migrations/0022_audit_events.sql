-- The audit log: who did what to which object, from where, and how it ended. Append-only:
-- a trigger refuses UPDATE and DELETE of rows; retention drops whole months (partitions by
-- `at`), which no row trigger sees.

CREATE TABLE audit_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL DEFAULT now(),
    -- who: 'admin:token', 'admin:local', 'web:<name>', '<platform>:<user id>', 'cli:<os user>',
    -- 'system'
    actor       text        NOT NULL,
    -- a dotted name: 'kb.document.delete', 'web.sign_in', 'tool.approval.decide'
    action      text        NOT NULL,
    object_type text,
    object_id   text,
    outcome     text        NOT NULL CHECK (outcome IN ('ok', 'denied', 'failed')),
    reason      text,
    -- where from: the client's address (if any) and the surface ('api', 'mcp', 'ops', 'web',
    -- 'cli', a platform name)
    remote_addr text,
    surface     text        NOT NULL,
    details     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);

CREATE INDEX audit_events_at ON audit_events (at DESC, id DESC);
CREATE INDEX audit_events_actor ON audit_events (actor, id DESC);
CREATE INDEX audit_events_action ON audit_events (action, id DESC);

CREATE FUNCTION audit_events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused (retention drops whole months)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();

-- The month partitions from the month of `since` to `ahead` months after it (idempotent).
CREATE FUNCTION audit_ensure_partitions(since timestamptz, ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    month date := date_trunc('month', since AT TIME ZONE 'UTC')::date;
    made integer := 0;
    name text;
BEGIN
    FOR i IN 0..ahead LOOP
        name := 'audit_events_' || to_char(month, 'YYYY_MM');
        IF to_regclass(name) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)',
                name,
                (month::timestamp AT TIME ZONE 'UTC'),
                ((month + interval '1 month')::timestamp AT TIME ZONE 'UTC')
            );
            made := made + 1;
        END IF;
        month := (month + interval '1 month')::date;
    END LOOP;
    RETURN made;
END
$$;

SELECT audit_ensure_partitions(now(), 2);
