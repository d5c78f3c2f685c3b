-- Step 1 of 3 of partitioning the inbox (inbound_events) by month of received_at, online.
--
-- A unique index on a partitioned table must include the partition key, so (platform,
-- event_id) would be unique per month only and a redelivery across a month boundary would
-- pass. The dedupe keys therefore move to their own small unpartitioned table, written by a
-- BEFORE INSERT trigger on inbound_events (0029): the trigger inserts the keys with ON
-- CONFLICT DO NOTHING and skips the inbox row when they were already there, which is what the
-- unique indexes' ON CONFLICT DO NOTHING did (a concurrent twin waits for the first one's
-- commit). The table is narrow (no payload), so it stays small for the dedupe window.
CREATE TABLE inbound_keys (
    platform          text        NOT NULL,
    event_id          text,
    message_key       text,
    -- the inbox row that holds these keys (a message's inbound_event_id)
    inbound_event_id  bigint      NOT NULL,
    received_at       timestamptz NOT NULL
);
CREATE UNIQUE INDEX inbound_keys_event ON inbound_keys (platform, event_id)
    WHERE event_id IS NOT NULL;
CREATE UNIQUE INDEX inbound_keys_message ON inbound_keys (platform, message_key)
    WHERE message_key IS NOT NULL;
-- retention prunes keys older than the dedupe window
CREATE INDEX inbound_keys_received ON inbound_keys (received_at);

-- The range the old table will cover as one partition: everything before the first of a
-- month at least two days ahead. Added NOT VALID (a brief lock, no scan; new rows are checked
-- at once) and validated by 0028 without blocking writes, so the ATTACH in 0029 skips its
-- scan. 0027-0029 run in one `gateway migrate`, minutes apart at most.
DO $$
DECLARE
    bound timestamptz := date_trunc(
        'month', (now() AT TIME ZONE 'UTC') + interval '1 month' + interval '2 days'
    ) AT TIME ZONE 'UTC';
BEGIN
    EXECUTE format(
        'ALTER TABLE inbound_events ADD CONSTRAINT inbound_events_legacy_range '
        'CHECK (received_at < %L::timestamptz) NOT VALID',
        bound
    );
END
$$;
