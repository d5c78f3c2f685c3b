-- Pacing with bursts (issue 12): a key admits a short burst over its interval, as the
-- platforms do (Mattermost's limiter: 10 per second with a burst of 100; Slack and Telegram
-- allow "short bursts"). The cell is GCRA's: pace_slots.next_at is the key's theoretical
-- arrival time, and a call may start once that is at most (burst - 1) intervals ahead. With a
-- burst of 1 this is exactly the spacing of migration 0008. A backlog (messages accepted while
-- the database was away) then goes out at once instead of one interval apart.
CREATE FUNCTION pace_reserve(keys text[], intervals double precision[], bursts integer[],
                             max_wait double precision)
RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE
    now_ts timestamptz := clock_timestamp();
    start  timestamptz;
    wait   double precision;
BEGIN
    INSERT INTO pace_slots (key, next_at)
    SELECT k, now_ts FROM unnest(keys) AS k ORDER BY k
    ON CONFLICT (key) DO NOTHING;
    PERFORM 1 FROM pace_slots WHERE key = ANY (keys) ORDER BY key FOR UPDATE;
    SELECT greatest(now_ts, max(p.next_at - make_interval(secs => r.iv * (greatest(r.b, 1) - 1))))
    INTO start
    FROM pace_slots AS p JOIN unnest(keys, intervals, bursts) AS r (k, iv, b) ON p.key = r.k;
    wait := extract(epoch FROM start - now_ts);
    IF random() < 0.001 THEN
        -- now and then forget chats whose spacing has long passed (bounded table)
        DELETE FROM pace_slots WHERE key IN (
            SELECT key FROM pace_slots WHERE next_at < now_ts - interval '1 hour'
            FOR UPDATE SKIP LOCKED);
    END IF;
    IF wait > max_wait THEN
        RETURN wait;
    END IF;
    UPDATE pace_slots AS p SET next_at = greatest(p.next_at, start) + make_interval(secs => r.iv)
    FROM unnest(keys, intervals) AS r (k, iv)
    WHERE p.key = r.k;
    RETURN wait;
END
$$;

-- The form of migration 0008, for a process of the previous release during a rolling
-- upgrade: every key with a burst of 1 (the same spacing it always had).
CREATE OR REPLACE FUNCTION pace_reserve(keys text[], intervals double precision[],
                                        max_wait double precision)
RETURNS double precision LANGUAGE sql AS $$
    SELECT pace_reserve(keys, intervals, array_fill(1, ARRAY[cardinality(keys)]), max_wait)
$$;
