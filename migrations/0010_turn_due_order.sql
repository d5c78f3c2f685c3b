-- Issue 17: the turn claim takes the due session that waited longest
-- (ORDER BY last_message_at NULLS FIRST, id). With the due-sessions index on id alone the
-- planner walked sessions_last_message from the oldest session and filtered out every one
-- not due: a claim grew with the number of sessions ever served (2.5 ms at a few thousand).
-- This partial index holds only the due sessions, in the claim's own order.
DROP INDEX IF EXISTS sessions_turn_due;
CREATE INDEX sessions_turn_due ON sessions (last_message_at NULLS FIRST, id)
    WHERE turn_requested_seq > turn_done_seq;
