-- Streaming (issue 16): previews of an answer while the model writes it, and one pacing
-- budget per bot and chat shared by every replica.
--
-- A preview is a platform message (or a web chat preview id) showing the answer so far. It
-- belongs to the turn that runs after ``after_seq`` (the claim's done_seq, the same for a
-- takeover of that turn), one row per part. When the answer is recorded the rows get the
-- reply's seq and its number of parts; the delivery of part i then edits preview i into the
-- final text instead of sending again, and the last part deletes the surplus previews.
CREATE TABLE stream_previews (
    session_id          bigint      NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    after_seq           bigint      NOT NULL,
    part_no             integer     NOT NULL,
    platform_message_id text        NOT NULL,
    reply_seq           bigint,
    final_parts         integer,
    deleted             boolean     NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, after_seq, part_no)
);
CREATE INDEX stream_previews_reply ON stream_previews (session_id, reply_seq)
    WHERE reply_seq IS NOT NULL;

-- The shared pacing budget: the earliest time the next call on a key (a bot and chat) may
-- be made. Unlogged: losing it in a crash only forgets some spacing.
CREATE UNLOGGED TABLE pace_slots (
    key     text        PRIMARY KEY,
    next_at timestamptz NOT NULL
);

-- Reserve the next slot under (key, min interval) rules: returns the seconds to wait before
-- the call. When that wait is over max_wait nothing is reserved (the caller skips: a preview
-- edit that would come too late is left out, the next one carries more text).
CREATE FUNCTION pace_reserve(keys text[], intervals double precision[],
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
    SELECT greatest(now_ts, max(next_at)) INTO start FROM pace_slots WHERE key = ANY (keys);
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
    UPDATE pace_slots AS p SET next_at = start + make_interval(secs => r.iv)
    FROM unnest(keys, intervals) AS r (k, iv)
    WHERE p.key = r.k;
    RETURN wait;
END
$$;
