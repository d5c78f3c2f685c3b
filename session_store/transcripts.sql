-- Transcripts of voice notes and audio, kept on the message they were shared with.

-- name: transcript
SELECT metadata->>'transcript' FROM messages WHERE id = $1 AND metadata ? 'transcript'

-- name: save_transcript
-- the first transcript wins (a job run twice, by two workers, stores one); the transcript
-- becomes the message's text (after a caption, if any), marked as transcribed; never on a
-- message erased meanwhile (``gateway people forget``)
UPDATE messages
SET content = CASE WHEN content = '' THEN $2 ELSE content || E'\n\n' || $2 END,
    metadata = metadata || jsonb_build_object('transcribed', true, 'transcript', $2::text)
WHERE id = $1 AND NOT (metadata ? 'transcript') AND NOT (metadata ? 'erased')
RETURNING id
