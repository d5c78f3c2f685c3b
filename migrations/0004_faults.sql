-- Faults (issue 12): takeover in seconds and fenced deliveries.
--
-- Each gateway process takes an id from this sequence and holds the session-level advisory
-- lock (GATEWAY_PROCESS_LOCK_CLASS, id) on a dedicated connection while it lives: PostgreSQL
-- drops the lock with the connection, so "is the owner of this claim alive" is one look at
-- pg_locks. Turn and delivery claims record the owning process; a claim whose process is dead
-- is taken over at once instead of after its lease.
CREATE SEQUENCE gateway_process_ids AS integer MINVALUE 1 MAXVALUE 2147483647 CYCLE;

ALTER TABLE sessions ADD COLUMN turn_process integer;

-- claim_token fences MARK_SENT / MARK_RETRY / MARK_FAILED: a worker whose claim was taken
-- over writes nothing. ambiguous: the send may or may not have reached the platform.
ALTER TABLE deliveries
    ADD COLUMN claim_token uuid,
    ADD COLUMN claim_process integer,
    ADD COLUMN ambiguous boolean NOT NULL DEFAULT false;
