-- Takeover within 2 s, after a database restart too (issue 12).
--
-- A restart drops every liveness lock (0004) until each live process has reconnected, so a
-- claim whose process holds no lock is not yet proof of death. Each process records here the
-- server lifetime (pg_postmaster_start_time()) in which it last took its lock: a lockless
-- process that locked in this lifetime has died (no grace needed), and one that has not may
-- only be declared dead once some process re-locked in this lifetime more than a moment ago.
CREATE TABLE gateway_processes (
    id                integer     PRIMARY KEY,
    server_started_at timestamptz NOT NULL,
    locked_at         timestamptz NOT NULL DEFAULT now()
);

-- When a delivery was claimed: a send found in flight from a dead process began after this, so
-- recovery can tell that it is still within the platform's idempotency window (Mattermost
-- keeps a pending_post_id for 30 s) and resend under the same key instead of failing it as
-- ambiguous.
ALTER TABLE deliveries ADD COLUMN claimed_at timestamptz;
