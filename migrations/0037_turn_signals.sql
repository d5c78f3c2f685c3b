-- Conversations that change while an answer is written. A turn request may wait for the
-- thread to be quiet (a burst: the not-before time is written by the message's own ingest),
-- and a running turn is told, through its session row, to stop (/stop, a stop reaction) or
-- to start over (its question edited or deleted): the kind of signal and the seq it concerns.
-- The running turn reads the row about once a second while the model writes.
ALTER TABLE sessions
    ADD COLUMN turn_not_before timestamptz,
    ADD COLUMN turn_signal     text,
    ADD COLUMN turn_signal_seq bigint;
ALTER TABLE sessions ADD CONSTRAINT sessions_turn_signal
    CHECK (turn_signal IN ('stop', 'edit', 'delete'));
