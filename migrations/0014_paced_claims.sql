-- A claimed delivery waiting for its chat's pacer is not on the wire (issue 12). Only a
-- delivery that actually has to wait records it (fenced by its claim_token): pacing_until is
-- set when the wait begins and cleared right before the request goes out. A claim of a dead
-- process found with it set has sent nothing, so recovery resends it on every platform
-- instead of failing it as ambiguous. NULL: not waiting (unclaimed, or maybe on the wire).
ALTER TABLE deliveries ADD COLUMN pacing_until timestamptz;
