-- Schedules: questions the assistant is asked in a place at a time or on a cron expression,
-- and each firing once (the unique (schedule_id, due_at) is the fence: a second replica that
-- reached the same firing writes nothing). First posts: the reply target of a place nobody
-- wrote in, built by its surface from the place alone, stored on its session.
ALTER TABLE sessions ADD COLUMN reply_target jsonb;

CREATE TABLE schedules (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text,
    platform        text        NOT NULL,
    scope           text        NOT NULL,
    chat_id         text        NOT NULL,
    thread_id       text,
    prompt          text        NOT NULL,
    -- the account it belongs to (platform:scope:user_id) or the operator who made it
    owner           text        NOT NULL,
    time_zone       text        NOT NULL DEFAULT 'UTC',
    -- exactly one of: a one-shot time, a cron expression (read in time_zone)
    fire_at         timestamptz,
    cron            text,
    status          text        NOT NULL DEFAULT 'active'
                        CHECK (status IN ('active', 'paused', 'done')),
    paused_reason   text,
    next_fire_at    timestamptz,
    last_fire_at    timestamptz,
    last_outcome    text,
    -- consecutive failed firings (five pause the schedule)
    failures        integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_one_kind CHECK ((fire_at IS NULL) <> (cron IS NULL))
);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE status = 'active';
CREATE INDEX schedules_place ON schedules (platform, scope, chat_id, thread_id);

CREATE TABLE schedule_firings (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id     bigint      NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    due_at          timestamptz NOT NULL,
    fired_at        timestamptz NOT NULL DEFAULT now(),
    -- queued: its turn is asked for; sent / failed: its answer's delivery; skipped: too late
    outcome         text        NOT NULL
                        CHECK (outcome IN ('queued', 'sent', 'failed', 'skipped')),
    reason          text,
    session_id      bigint      REFERENCES sessions (id),
    seq_no          bigint,
    settled_at      timestamptz,
    CONSTRAINT schedule_firings_once UNIQUE (schedule_id, due_at)
);
CREATE INDEX schedule_firings_open ON schedule_firings (session_id) WHERE outcome = 'queued';
