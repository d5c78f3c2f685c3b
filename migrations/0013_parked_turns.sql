-- Issue 14 follow-up: a turn waiting for an approval does not hold a turn worker. It parks
-- the session instead: the lease is released without finishing the turn (the asking message
-- stays unanswered) and turn_parked_on names the pending approval. A parked session is not
-- claimed until the approval is decided or expires (both clear turn_parked_on, in the same
-- transaction as the decision). turn_parked_seq is the newest seq the parked run handled:
-- the resumed run handles exactly those messages again (the approval's idempotency key is
-- tied to that run's question), and messages that arrived meanwhile get the next run.
ALTER TABLE sessions ADD COLUMN turn_parked_on text;
ALTER TABLE sessions ADD COLUMN turn_parked_seq bigint;

-- the turn claim's index holds only sessions that are due and not parked
DROP INDEX IF EXISTS sessions_turn_due;
CREATE INDEX sessions_turn_due ON sessions (last_message_at NULLS FIRST, id)
    WHERE turn_requested_seq > turn_done_seq AND turn_parked_on IS NULL;
-- the sweeper's safety net: parked sessions whose approval is no longer pending
CREATE INDEX sessions_turn_parked ON sessions (turn_parked_on)
    WHERE turn_parked_on IS NOT NULL;
