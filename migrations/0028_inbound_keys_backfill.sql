-- Step 2 of 3 of partitioning the inbox: the keys of every stored event into inbound_keys,
-- and the old table's range proven. Both take only locks that let ingest go on (ACCESS SHARE
-- to read, SHARE UPDATE EXCLUSIVE to validate): this is the long step on a big inbox, and the
-- old unique indexes still dedupe meanwhile. Rows committed after this read are caught up by
-- 0029 under its lock.
INSERT INTO inbound_keys (platform, event_id, message_key, inbound_event_id, received_at)
SELECT platform, event_id, message_key, id, received_at
FROM inbound_events
WHERE event_id IS NOT NULL OR message_key IS NOT NULL
ON CONFLICT DO NOTHING;

ALTER TABLE inbound_events VALIDATE CONSTRAINT inbound_events_legacy_range;

-- fresh statistics, so 0029's catch-up under its lock is planned as the index range scan it is
ANALYZE inbound_keys;
ANALYZE inbound_events;
