-- Step 3 of 3 of partitioning the inbox: inbound_events becomes a table partitioned by month
-- of received_at. The old table is renamed and ATTACHed as one partition,
-- inbound_events_before_YYYY_MM, covering everything before the bound 0027 proved (the ATTACH
-- finds the validated CHECK constraint and skips the scan, and the parent's indexes reuse the
-- old table's own). Everything here is catalog work plus a catch-up of the keys written
-- while 0028 ran: the ACCESS EXCLUSIVE lock lasted 1.3 s on a 10-million-row inbox under
-- writes (benchmarks/partition_migration.py measures it), and it grows with the writes during
-- 0028, not with the inbox.
--
-- The parent has no primary key (one would have to include received_at and be built on the
-- old table under this lock); each partition keeps its own primary key on id, and ids stay
-- unique through the one sequence. Month partitions are made ahead by the retention loop
-- (inbound_ensure_partitions); the DEFAULT partition takes a row no month partition holds
-- yet, so an insert never fails.

CREATE FUNCTION inbound_events_dedupe() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event_id IS NULL AND NEW.message_key IS NULL THEN
        RETURN NEW;
    END IF;
    INSERT INTO inbound_keys (platform, event_id, message_key, inbound_event_id, received_at)
    VALUES (NEW.platform, NEW.event_id, NEW.message_key, NEW.id, NEW.received_at)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    RETURN NULL;  -- a redelivery: no inbox row, as ON CONFLICT DO NOTHING did
END
$$;

CREATE FUNCTION inbound_ensure_partitions(since timestamptz, ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    month date := date_trunc('month', since AT TIME ZONE 'UTC')::date;
    floor date;
    made integer := 0;
    name text;
    lo timestamptz;
    hi timestamptz;
BEGIN
    -- months before the old table's bound are its own
    SELECT max(to_date(substr(c.relname, 23), 'YYYY_MM')) INTO floor
    FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'inbound_events'::regclass
      AND c.relname ~ '^inbound_events_before_[0-9]{4}_[0-9]{2}$';
    FOR i IN 0..ahead LOOP
        name := 'inbound_events_' || to_char(month, 'YYYY_MM');
        IF (floor IS NULL OR month >= floor) AND to_regclass(name) IS NULL THEN
            lo := month::timestamp AT TIME ZONE 'UTC';
            hi := (month + interval '1 month')::timestamp AT TIME ZONE 'UTC';
            -- made beside the parent, given the month's rows the DEFAULT partition caught
            -- meanwhile, then attached (a partition cannot be created over rows in DEFAULT)
            EXECUTE format(
                'CREATE TABLE %I (LIKE inbound_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                name
            );
            EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id)', name);
            EXECUTE format(
                'WITH moved AS (DELETE FROM inbound_events_default '
                'WHERE received_at >= %L AND received_at < %L RETURNING *) '
                'INSERT INTO %I SELECT * FROM moved',
                lo, hi, name
            );
            EXECUTE format(
                'ALTER TABLE inbound_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                name, lo, hi
            );
            made := made + 1;
        END IF;
        month := (month + interval '1 month')::date;
    END LOOP;
    RETURN made;
END
$$;

DO $$
DECLARE
    bound timestamptz;
    legacy text;
    last_id bigint;
    newest timestamptz;
    since bigint;
BEGIN
    LOCK TABLE inbound_events IN ACCESS EXCLUSIVE MODE;
    -- the keys of rows committed after 0028 read the table: an ingest transaction is short,
    -- so they are among the rows of the last ten minutes before its newest key
    SELECT max(received_at) INTO newest FROM inbound_keys;
    SELECT min(inbound_event_id) INTO since FROM inbound_keys
    WHERE received_at >= newest - interval '10 minutes';
    INSERT INTO inbound_keys (platform, event_id, message_key, inbound_event_id, received_at)
    SELECT platform, event_id, message_key, id, received_at
    FROM inbound_events
    WHERE id >= coalesce(since, 0) AND (event_id IS NOT NULL OR message_key IS NOT NULL)
    ON CONFLICT DO NOTHING;

    SELECT substring(pg_get_constraintdef(oid) FROM '''([^'']+)''')::timestamptz INTO bound
    FROM pg_constraint
    WHERE conrelid = 'inbound_events'::regclass AND conname = 'inbound_events_legacy_range';
    legacy := 'inbound_events_before_' || to_char(bound AT TIME ZONE 'UTC', 'YYYY_MM');
    SELECT pg_sequence_last_value('inbound_events_id_seq') INTO last_id;

    EXECUTE format('ALTER TABLE inbound_events RENAME TO %I', legacy);
    EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT inbound_events_pkey TO %I',
                   legacy, legacy || '_pkey');
    EXECUTE format('ALTER INDEX inbound_events_event RENAME TO %I', legacy || '_event');
    EXECUTE format('ALTER INDEX inbound_events_message RENAME TO %I', legacy || '_message');
    EXECUTE format('ALTER INDEX inbound_events_rejected RENAME TO %I', legacy || '_rejected');
    EXECUTE format('ALTER INDEX inbound_events_not_accepted RENAME TO %I',
                   legacy || '_not_accepted');
    -- the identity's sequence goes with the identity: one plain sequence for every partition
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP IDENTITY', legacy);
    CREATE SEQUENCE inbound_events_id_seq;
    IF last_id IS NOT NULL THEN
        PERFORM setval('inbound_events_id_seq', last_id);
    END IF;

    CREATE TABLE inbound_events (
        id           bigint      CONSTRAINT inbound_events_id_not_null NOT NULL
                             DEFAULT nextval('inbound_events_id_seq'),
        platform     text        CONSTRAINT inbound_events_platform_not_null NOT NULL,
        event_id     text,
        message_key  text,
        status       text        CONSTRAINT inbound_events_status_not_null NOT NULL
            CONSTRAINT inbound_events_status_check
            CHECK (status IN ('accepted', 'ignored', 'rejected')),
        reason       text,
        payload      jsonb,
        received_at  timestamptz CONSTRAINT inbound_events_received_at_not_null NOT NULL DEFAULT now()
    ) PARTITION BY RANGE (received_at);
    ALTER SEQUENCE inbound_events_id_seq OWNED BY inbound_events.id;
    CREATE INDEX inbound_events_rejected ON inbound_events (received_at DESC)
        WHERE status = 'rejected';
    CREATE INDEX inbound_events_not_accepted ON inbound_events (status, id DESC)
        WHERE status <> 'accepted';
    CREATE TRIGGER inbound_events_dedupe BEFORE INSERT ON inbound_events
        FOR EACH ROW EXECUTE FUNCTION inbound_events_dedupe();

    EXECUTE format(
        'ALTER TABLE inbound_events ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
        legacy, bound
    );
    CREATE TABLE inbound_events_default PARTITION OF inbound_events DEFAULT;
    ALTER TABLE inbound_events_default ADD PRIMARY KEY (id);
    PERFORM inbound_ensure_partitions(now(), 1);
END
$$;
