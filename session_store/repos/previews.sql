-- Streaming previews (stream_previews) and the shared pacing budget (pace_slots, through
-- pace_reserve(): migrations 0008 and 0015).

-- name: load_pending
SELECT part_no, platform_message_id FROM stream_previews
WHERE session_id = $1 AND after_seq = $2 AND reply_seq IS NULL AND NOT deleted
ORDER BY part_no

-- name: add
INSERT INTO stream_previews (session_id, after_seq, part_no, platform_message_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id, after_seq, part_no)
DO UPDATE SET platform_message_id = EXCLUDED.platform_message_id, deleted = false

-- name: for_reply
SELECT part_no, platform_message_id, final_parts, deleted FROM stream_previews
WHERE session_id = $1 AND reply_seq = $2
ORDER BY part_no

-- name: mark_deleted
UPDATE stream_previews SET deleted = true
WHERE session_id = $1 AND reply_seq = $2 AND part_no = ANY($3::integer[])

-- name: forget
UPDATE stream_previews SET deleted = true
WHERE session_id = $1 AND after_seq = $2 AND part_no = ANY($3::integer[])

-- name: bind
-- used inside ``Outbox.finish_turn_outbox``'s transaction when the turn streamed previews
UPDATE stream_previews SET reply_seq = $3, final_parts = $4
WHERE session_id = $1 AND after_seq = $2 AND reply_seq IS NULL

-- name: reserve
SELECT pace_reserve($1::text[], $2::double precision[], $3::integer[], $4::double precision)

-- name: seed
-- carry a reservation made elsewhere into the shared budget: the key is free no sooner than
-- that, and no later than it already was (a maximum, never added to what is already there)
INSERT INTO pace_slots (key, next_at)
SELECT k, clock_timestamp() + make_interval(secs => s)
FROM unnest($1::text[], $2::double precision[]) AS r (k, s)
ORDER BY k
ON CONFLICT (key) DO UPDATE SET next_at = greatest(pace_slots.next_at, excluded.next_at)
