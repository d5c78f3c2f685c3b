-- Operator surface (issue 7): list dead letters (rejected / ignored inbound events) newest
-- first without scanning the whole inbox, which is mostly accepted rows.
CREATE INDEX inbound_events_not_accepted ON inbound_events (status, id DESC)
    WHERE status <> 'accepted';
