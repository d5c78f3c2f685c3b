-- Files a surface keeps itself because its platform has nowhere to fetch them from later: the
-- web chat's voice notes, which the transcription job fetches by id like any platform's file
-- (gateway/core/ports.py HeldFiles, session_store/held_files.py).
CREATE TABLE held_files (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    media_type text,
    size_bytes integer     NOT NULL,
    content    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
