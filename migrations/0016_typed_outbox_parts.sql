-- Typed outbox parts: a delivery row says what it delivers in columns, not in markers inside
-- its text or its target (gateway/outbox/parts.py). kind: text, file or approval_card;
-- content: the text (a file's caption); part: the kind's other fields as a JSON document with
-- its format version v; data: a file's bytes.
ALTER TABLE deliveries
    ADD COLUMN kind text NOT NULL DEFAULT 'text'
        CHECK (kind IN ('text', 'file', 'approval_card')),
    ADD COLUMN part jsonb NOT NULL DEFAULT '{"v": 1}',
    ADD COLUMN data bytea;

-- Rows written before: a file part was "\x1egateway-file:" + JSON with the bytes in base64 in
-- content; a part of a streamed answer carried target.extra.stream_previews; an approval card
-- target.extra.approval_id. Each becomes its typed form. A file part whose envelope does not
-- parse stays a text part, as the code before read it.
DO $$
DECLARE
    r record;
    body jsonb;
BEGIN
    FOR r IN SELECT id, content FROM deliveries
             WHERE left(content, 14) = E'\x1egateway-file:'
    LOOP
        BEGIN
            body := substr(r.content, 15)::jsonb;
            UPDATE deliveries
            SET kind = 'file',
                part = jsonb_strip_nulls(jsonb_build_object(
                    'v', 1, 'name', body->>'name', 'mime_type', body->>'mime_type',
                    'caption', body->'caption')),
                data = decode(body->>'data', 'base64'),
                content = coalesce(body->>'caption', '')
            WHERE id = r.id AND body ? 'name' AND body ? 'mime_type' AND body ? 'data';
        EXCEPTION WHEN others THEN
            NULL;  -- not a file envelope: delivered as text, as before
        END;
    END LOOP;
END
$$;

UPDATE deliveries
SET part = part || '{"finishes_stream": true}', target = target #- '{extra,stream_previews}'
WHERE target->'extra' ? 'stream_previews';

UPDATE deliveries
SET kind = 'approval_card',
    part = part || jsonb_build_object('approval_id', target->'extra'->>'approval_id'),
    target = target #- '{extra,approval_id}'
WHERE target->'extra' ? 'approval_id';

-- A tool call or result was marked in its message's metadata; the message's role (and the
-- turn's typed reply) say it now.
UPDATE messages SET metadata = metadata - 'tool_exchange_role'
WHERE metadata ? 'tool_exchange_role';
