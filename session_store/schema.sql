-- The declared current schema, kept in step with migrations/ (a test asserts that a
-- database built from this file equals one built by running every migration).

-- The session store: one row per session, one row per message (append-only), an inbox that is
-- also the dead-letter store, and an outbox of deliveries that carry their own reply target.

CREATE TABLE sessions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    platform          text        NOT NULL,
    scope             text        NOT NULL,
    chat_id           text        NOT NULL,
    thread_id         text,
    status            text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'closed', 'archived')),
    title             text,
    kind              text        NOT NULL DEFAULT 'chat',
    selected_model    text,
    last_seq_no       bigint      NOT NULL DEFAULT 0,
    message_count     bigint      NOT NULL DEFAULT 0,
    -- turn scheduling: the newest seq that asked for an answer, the newest seq a turn handled,
    -- and the lease of the worker running the session's turn right now (fencing token + expiry)
    turn_requested_seq bigint     NOT NULL DEFAULT 0,
    turn_done_seq     bigint      NOT NULL DEFAULT 0,
    turn_owner        uuid,
    turn_lease_until  timestamptz,
    -- the gateway process holding the turn (its liveness lock, migration 0004)
    turn_process      integer,
    -- a turn waiting for an approval (migration 0013): the pending approval it is parked on
    -- (not claimed until that is decided or expires) and the newest seq the parked run handled
    turn_parked_on    text,
    turn_parked_seq   bigint,
    answered          boolean     NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    last_message_at   timestamptz,
    closed_at         timestamptz,
    metadata          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- 0018: the reply target of a place nobody wrote in (a first post), built by its surface
    -- from the place alone; a user message's own target comes first
    reply_target      jsonb,
    -- 0034: what the session is about, how much it matters, and labels to find it by
    topic             text,
    priority          smallint    NOT NULL DEFAULT 0,
    tags              text[]      NOT NULL DEFAULT '{}',
    -- 0037: a burst's turn starts once the thread was quiet until then; a running turn is
    -- told to stop or start over (its question edited or deleted) and which seq that concerns
    turn_not_before   timestamptz,
    turn_signal       text CONSTRAINT sessions_turn_signal CHECK (turn_signal IN ('stop', 'edit', 'delete')),
    turn_signal_seq   bigint
);

-- exactly one open (active or paused) session per key; NULL thread ids compare equal through
-- coalesce
CREATE UNIQUE INDEX sessions_active_key
    ON sessions (platform, scope, chat_id, (coalesce(thread_id, '')))
    WHERE status IN ('active', 'paused');
CREATE INDEX sessions_tags ON sessions USING gin (tags);
CREATE INDEX sessions_key ON sessions (platform, scope, chat_id, thread_id);
CREATE INDEX sessions_turn_due ON sessions (last_message_at NULLS FIRST, id)
    WHERE turn_requested_seq > turn_done_seq AND turn_parked_on IS NULL;
CREATE INDEX sessions_turn_parked ON sessions (turn_parked_on)
    WHERE turn_parked_on IS NOT NULL;
CREATE INDEX sessions_last_message ON sessions (last_message_at DESC NULLS LAST, id DESC);

CREATE TABLE messages (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id          bigint      NOT NULL REFERENCES sessions (id),
    seq_no              bigint      NOT NULL,
    -- the inbox row this message came in with (NULL for assistant and backfilled rows)
    inbound_event_id    bigint,
    role                text        NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    sender_id           text,
    sender_name         text,
    external_id         text,
    reply_to_external_id text,
    content             text        NOT NULL,
    -- for user messages: where the answer goes, computed at ingest, never re-derived
    reply_target        jsonb,
    command             text,
    trigger             text,
    backfill            boolean     NOT NULL DEFAULT false,
    model               text,
    tokens_used         integer,
    feedback            smallint,
    edited_at           timestamptz,
    sent_at             timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    metadata            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    content_tsv         tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
    -- 0026: the inbound message's trace context while tracing is on (gateway/core/tracing.py)
    traceparent         text,
    CONSTRAINT messages_session_seq UNIQUE (session_id, seq_no),
    -- 0034: what the message is (answers are answer, tool results tool_result), and weight
    kind                text        NOT NULL DEFAULT 'chat' CHECK (kind IN (
        'chat', 'proposal', 'review', 'decision', 'summary', 'question', 'answer', 'warning',
        'tool_result', 'rolling')),
    importance          smallint    NOT NULL DEFAULT 0
);
-- a session's decisions, read on the warm path without scanning its messages
CREATE INDEX messages_decisions ON messages (session_id, seq_no) WHERE kind = 'decision';
CREATE UNIQUE INDEX messages_external ON messages (session_id, external_id)
    WHERE external_id IS NOT NULL;
CREATE INDEX messages_inbound_event ON messages (inbound_event_id)
    WHERE inbound_event_id IS NOT NULL;
CREATE INDEX messages_content_tsv ON messages USING gin (content_tsv);

-- Edits, deletions and feedback: annotations on a message, never a rewrite of it.
CREATE TABLE message_annotations (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id  bigint      NOT NULL REFERENCES messages (id),
    kind        text        NOT NULL CHECK (kind IN ('edit', 'delete', 'feedback')),
    content     text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    metadata    jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX message_annotations_message ON message_annotations (message_id);

-- The inbox (and dead-letter store), partitioned by month of received_at (0027-0029). One row
-- per distinct inbound event. Two dedupe keys: the platform's delivery id (Telegram update_id,
-- Slack event_id) and the message's own identity in its chat (Telegram chat+message_id, Slack
-- channel+ts, Mattermost post id). They are unique in inbound_keys, an unpartitioned table the
-- BEFORE INSERT trigger writes (a unique index on the partitioned table would be unique per
-- month only). Month partitions are made ahead by the retention loop; each keeps its own
-- primary key on id; DEFAULT takes what no month holds yet.
CREATE SEQUENCE inbound_events_id_seq;
CREATE TABLE inbound_events (
    id           bigint      CONSTRAINT inbound_events_id_not_null NOT NULL
                             DEFAULT nextval('inbound_events_id_seq'),
    platform     text        CONSTRAINT inbound_events_platform_not_null NOT NULL,
    event_id     text,
    message_key  text,
    status       text        CONSTRAINT inbound_events_status_not_null NOT NULL
        CONSTRAINT inbound_events_status_check
        CHECK (status IN ('accepted', 'ignored', 'rejected')),
    reason       text,
    payload      jsonb,
    received_at  timestamptz CONSTRAINT inbound_events_received_at_not_null NOT NULL DEFAULT now()
) PARTITION BY RANGE (received_at);
ALTER SEQUENCE inbound_events_id_seq OWNED BY inbound_events.id;
CREATE INDEX inbound_events_rejected ON inbound_events (received_at DESC)
    WHERE status = 'rejected';
CREATE TABLE inbound_keys (
    platform          text        NOT NULL,
    event_id          text,
    message_key       text,
    -- the inbox row that holds these keys (a message's inbound_event_id)
    inbound_event_id  bigint      NOT NULL,
    received_at       timestamptz NOT NULL
);
CREATE UNIQUE INDEX inbound_keys_event ON inbound_keys (platform, event_id)
    WHERE event_id IS NOT NULL;
CREATE UNIQUE INDEX inbound_keys_message ON inbound_keys (platform, message_key)
    WHERE message_key IS NOT NULL;
-- retention prunes keys older than the dedupe window
CREATE INDEX inbound_keys_received ON inbound_keys (received_at);

CREATE FUNCTION inbound_events_dedupe() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event_id IS NULL AND NEW.message_key IS NULL THEN
        RETURN NEW;
    END IF;
    INSERT INTO inbound_keys (platform, event_id, message_key, inbound_event_id, received_at)
    VALUES (NEW.platform, NEW.event_id, NEW.message_key, NEW.id, NEW.received_at)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    RETURN NULL;  -- a redelivery: no inbox row, as ON CONFLICT DO NOTHING did
END
$$;

CREATE FUNCTION inbound_ensure_partitions(since timestamptz, ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    month date := date_trunc('month', since AT TIME ZONE 'UTC')::date;
    floor date;
    made integer := 0;
    name text;
    lo timestamptz;
    hi timestamptz;
BEGIN
    -- months before the old table's bound are its own
    SELECT max(to_date(substr(c.relname, 23), 'YYYY_MM')) INTO floor
    FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'inbound_events'::regclass
      AND c.relname ~ '^inbound_events_before_[0-9]{4}_[0-9]{2}$';
    FOR i IN 0..ahead LOOP
        name := 'inbound_events_' || to_char(month, 'YYYY_MM');
        IF (floor IS NULL OR month >= floor) AND to_regclass(name) IS NULL THEN
            lo := month::timestamp AT TIME ZONE 'UTC';
            hi := (month + interval '1 month')::timestamp AT TIME ZONE 'UTC';
            -- made beside the parent, given the month's rows the DEFAULT partition caught
            -- meanwhile, then attached (a partition cannot be created over rows in DEFAULT)
            EXECUTE format(
                'CREATE TABLE %I (LIKE inbound_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                name
            );
            EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id)', name);
            EXECUTE format(
                'WITH moved AS (DELETE FROM inbound_events_default '
                'WHERE received_at >= %L AND received_at < %L RETURNING *) '
                'INSERT INTO %I SELECT * FROM moved',
                lo, hi, name
            );
            EXECUTE format(
                'ALTER TABLE inbound_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                name, lo, hi
            );
            made := made + 1;
        END IF;
        month := (month + interval '1 month')::date;
    END LOOP;
    RETURN made;
END
$$;

CREATE TRIGGER inbound_events_dedupe BEFORE INSERT ON inbound_events
    FOR EACH ROW EXECUTE FUNCTION inbound_events_dedupe();
CREATE TABLE inbound_events_default PARTITION OF inbound_events DEFAULT;
ALTER TABLE inbound_events_default ADD PRIMARY KEY (id);
SELECT inbound_ensure_partitions(now(), 1);

-- The outbox. One row per part of an assistant message, carrying its stored target.
CREATE TABLE deliveries (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id          bigint      NOT NULL REFERENCES messages (id),
    session_id          bigint      NOT NULL REFERENCES sessions (id),
    seq_no              bigint      NOT NULL,
    part_no             integer     NOT NULL,
    platform            text        NOT NULL,
    target              jsonb       NOT NULL,
    content             text        NOT NULL,
    status              text        NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
    attempts            integer     NOT NULL DEFAULT 0,
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    lease_until         timestamptz,
    last_error          text,
    platform_message_id text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz,
    -- the claim's fencing token and owning process; ambiguous: may or may not have been
    -- posted (migration 0004)
    claim_token         uuid,
    claim_process       integer,
    ambiguous           boolean     NOT NULL DEFAULT false,
    -- 0012: when the current claim was taken (a send in flight began after it)
    claimed_at          timestamptz,
    -- 0014: the claim waits for the chat's pacer until then, nothing of it on the wire yet
    -- (set only when a wait happens, cleared right before the send)
    pacing_until        timestamptz,
    -- 0016: what the part is (gateway/core/parts.py): its kind, its typed fields as a
    -- versioned document, a file's bytes
    kind                text        NOT NULL DEFAULT 'text'
                            CHECK (kind IN ('text', 'file', 'approval_card', 'edit_message',
                                           'delete_message')),
    part                jsonb       NOT NULL DEFAULT '{"v": 1}',
    data                bytea,
    -- 0026: the trace context of the message it answers, while tracing is on
    traceparent         text,
    CONSTRAINT deliveries_part UNIQUE (message_id, part_no)
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX deliveries_open_by_session ON deliveries (session_id, seq_no, part_no)
    WHERE status IN ('pending', 'sending');
CREATE INDEX deliveries_sending ON deliveries (lease_until) WHERE status = 'sending';
CREATE INDEX deliveries_status ON deliveries (status, id);

-- Durable per-adapter cursors (Mattermost last-seen post time per channel, ...).
CREATE TABLE adapter_cursors (
    name        text PRIMARY KEY,
    value       text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- From the super-session design: who takes part, tracked steps, relations, rolling
-- summaries over seq ranges, and outputs.
CREATE TABLE session_participants (
    session_id    bigint      NOT NULL REFERENCES sessions (id),
    participant   text        NOT NULL,
    role          text        NOT NULL DEFAULT 'member',
    display_name  text,
    last_read_seq bigint      NOT NULL DEFAULT 0,
    joined_at     timestamptz NOT NULL DEFAULT now(),
    metadata      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (session_id, participant)
);

CREATE TABLE session_checkpoints (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  bigint      NOT NULL REFERENCES sessions (id),
    name        text        NOT NULL,
    status      text        NOT NULL DEFAULT 'open',
    seq_no      bigint,
    detail      text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT session_checkpoints_name UNIQUE (session_id, name)
);
-- 0034: the unresolved checkpoints of a session, read with its decisions
CREATE INDEX session_checkpoints_open ON session_checkpoints (session_id, id)
    WHERE status NOT IN ('done', 'cancelled');

CREATE TABLE session_links (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id        bigint      NOT NULL REFERENCES sessions (id),
    linked_session_id bigint      REFERENCES sessions (id),
    relation          text        NOT NULL,
    url               text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- what the link points at: a kind and a reference in that kind's terms (id, path, URL)
    link_type         text,
    target_ref        text,
    CONSTRAINT session_links_link_type
        CHECK (link_type IN ('law', 'doc', 'task', 'collection', 'issue', 'report', 'artifact')),
    CONSTRAINT session_links_relation
        CHECK (relation IN ('input', 'evidence', 'output', 'related', 'supersedes'))
);
CREATE INDEX session_links_session ON session_links (session_id);

-- 0043: a session's minutes, due once when it closes (session_minutes_due)
CREATE TABLE session_minutes (
    session_id  bigint      PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    state       text        NOT NULL DEFAULT 'due'
                CHECK (state IN ('due', 'written', 'skipped', 'failed')),
    tries       integer     NOT NULL DEFAULT 0,
    -- when it is due (again); also the claim's lease
    due_at      timestamptz NOT NULL DEFAULT now(),
    kb          text,
    document_id bigint,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_minutes_due ON session_minutes (due_at) WHERE state = 'due';
-- a cited minutes document opens its session
CREATE INDEX session_minutes_document ON session_minutes (document_id)
    WHERE document_id IS NOT NULL;

CREATE FUNCTION session_minutes_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO session_minutes (session_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER sessions_minutes_due AFTER UPDATE OF status ON sessions
    FOR EACH ROW WHEN (NEW.status = 'closed' AND OLD.status IN ('active', 'paused'))
    EXECUTE FUNCTION session_minutes_due();

CREATE TABLE session_summaries (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id    bigint      NOT NULL REFERENCES sessions (id),
    from_seq      bigint      NOT NULL,
    to_seq        bigint      NOT NULL,
    content       text        NOT NULL,
    model         text,
    model_written boolean     NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (from_seq <= to_seq)
);
CREATE INDEX session_summaries_latest ON session_summaries (session_id, to_seq DESC);

CREATE TABLE session_artifacts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  bigint      NOT NULL REFERENCES sessions (id),
    kind        text        NOT NULL,
    name        text        NOT NULL,
    uri         text,
    content     text,
    seq_no      bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    metadata    jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX session_artifacts_session ON session_artifacts (session_id);

-- Operator surface: dead letters (rejected / ignored inbound events) newest first, without
-- scanning the accepted rows that make up most of the inbox.
CREATE INDEX inbound_events_not_accepted ON inbound_events (status, id DESC)
    WHERE status <> 'accepted';

-- The agent runtime: sticky model choice and feedback.

-- A person's last /model choice, per platform user: the second layer of model resolution
-- (this session's choice -> this person's last choice -> the default).
CREATE TABLE user_model_choices (
    platform    text        NOT NULL,
    user_id     text        NOT NULL,
    model       text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform, user_id)
);

-- Feedback on the bot's messages, one value per person (a reaction can be changed or taken
-- back); messages.feedback holds the sign of their sum.
CREATE TABLE message_feedback (
    message_id  bigint      NOT NULL REFERENCES messages (id),
    user_id     text        NOT NULL,
    value       smallint    NOT NULL CHECK (value IN (-1, 1)),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, user_id)
);

-- Reactions name the bot's message by the platform's id of it, which lives on the delivery.
CREATE INDEX deliveries_platform_message ON deliveries (platform, platform_message_id)
    WHERE platform_message_id IS NOT NULL;

-- Web chat identity (migration 0005).
-- A person who may sign in to the web chat. password_hash is an argon2id PHC string;
-- sessions_valid_after revokes every cookie issued before it (sign-out, removal).
CREATE TABLE web_accounts (
    id                    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                  text        NOT NULL UNIQUE,
    password_hash         text        NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    sessions_valid_after  timestamptz NOT NULL DEFAULT now()
);

-- The HMAC key of session cookies, made on first use.
CREATE TABLE web_auth_keys (
    id          smallint    PRIMARY KEY CHECK (id = 1),
    secret      bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The web account an OpenID Connect subject signs in as (migration 0025); a subject is
-- unique only within its issuer.
CREATE TABLE web_oidc_subjects (
    issuer      text        NOT NULL,
    subject     text        NOT NULL,
    account_id  bigint      NOT NULL REFERENCES web_accounts (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);

-- Approvals of tools whose policy says confirm = true, as durable workflow state.
-- A request is decided once (optimistic locking on version, only while pending and not
-- expired); the card posted into the thread goes through the outbox (card_message_id is
-- the session message whose delivery carries it) and is retired on any outcome.
CREATE TABLE tool_approvals (
    id              text        PRIMARY KEY,
    version         integer     NOT NULL DEFAULT 1,
    session_id      bigint      NOT NULL REFERENCES sessions (id),
    idempotency_key text        NOT NULL UNIQUE,
    tool_name       text        NOT NULL,
    arguments       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    owner           text        NOT NULL,
    approvers       text[]      NOT NULL DEFAULT '{}',
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    target          jsonb       NOT NULL,
    card_message_id bigint      REFERENCES messages (id),
    card_retired    boolean     NOT NULL DEFAULT false,
    decided_by      text,
    decided_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);

-- the sweeper: pending requests past expiry, and decided ones whose card is not retired yet
CREATE INDEX tool_approvals_open ON tool_approvals (expires_at) WHERE status = 'pending';
CREATE INDEX tool_approvals_unretired ON tool_approvals (decided_at)
    WHERE status <> 'pending' AND NOT card_retired;

-- Faults: ids of gateway processes, whose liveness is an advisory lock.
CREATE SEQUENCE gateway_process_ids AS integer MINVALUE 1 MAXVALUE 2147483647 CYCLE;

-- 0012: the server lifetime in which each process last took its liveness lock
CREATE TABLE gateway_processes (
    id                integer     PRIMARY KEY,
    server_started_at timestamptz NOT NULL,
    locked_at         timestamptz NOT NULL DEFAULT now()
);

-- The knowledge base: files stored by content hash, documents with their ingest job,
-- chunks searchable by full text and (where the server has pgvector) by embedding, and the
-- citations frozen with each answer.

-- One index per knowledge base, built with one embedding model: its name and dimension are
-- stored so two models never mix in one index (a change re-embeds through the jobs).
CREATE TABLE kb_bases (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL UNIQUE,
    embedding_model text        NOT NULL,
    embedding_dim   integer     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- File bytes by SHA-256, readable by every replica.
CREATE TABLE kb_files (
    sha256      text        PRIMARY KEY,
    size_bytes  bigint      NOT NULL,
    -- the bytes here (storage 'postgres'), or in an S3-compatible bucket under the hash
    content     bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    storage     text        NOT NULL DEFAULT 'postgres' CHECK (storage IN ('postgres', 's3')),
    CONSTRAINT kb_files_content_where CHECK ((storage = 'postgres') = (content IS NOT NULL))
);

-- A document and its ingest job (queued -> parsing -> embedding -> ready, or failed with the
-- reason). The same content in the same knowledge base is one document. Jobs are claimed with
-- FOR UPDATE SKIP LOCKED and a lease, so a crashed worker's job is taken over.
CREATE TABLE kb_documents (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kb_id            bigint      NOT NULL REFERENCES kb_bases (id),
    sha256           text        NOT NULL REFERENCES kb_files (sha256),
    name             text        NOT NULL,
    media_type       text        NOT NULL,
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'parsing', 'embedding', 'ready', 'failed')),
    error            text,
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_expires_at timestamptz,
    pages            integer,
    chunk_count      integer     NOT NULL DEFAULT 0,
    access_count     bigint      NOT NULL DEFAULT 0,
    -- where to announce "ready" / "failed" (a ReplyTarget), for files shared in a thread
    notify_target    jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- the model's summary of the document (gateway/knowledge/summaries.py); summary_due_at
    -- is also the claim's lease
    summary          text,
    summary_model    text,
    summary_tries    integer     NOT NULL DEFAULT 0,
    summary_due_at   timestamptz NOT NULL DEFAULT now(),
    summary_error    text,
    UNIQUE (kb_id, sha256)
);
CREATE INDEX kb_documents_due ON kb_documents (next_attempt_at, id)
    WHERE state IN ('queued', 'parsing', 'embedding');
CREATE INDEX kb_documents_summary_due ON kb_documents (summary_due_at, id)
    WHERE state = 'ready' AND summary IS NULL AND summary_tries < 3;

-- Passages: each keeps its document, page and heading path.
CREATE TABLE kb_chunks (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id  bigint      NOT NULL REFERENCES kb_documents (id) ON DELETE CASCADE,
    kb_id        bigint      NOT NULL REFERENCES kb_bases (id),
    ordinal      integer     NOT NULL,
    page         integer,
    section      text        NOT NULL DEFAULT '',
    content      text        NOT NULL,
    tokens       integer     NOT NULL,
    dims         integer,
    access_count bigint      NOT NULL DEFAULT 0,
    tsv          tsvector GENERATED ALWAYS AS
                 (to_tsvector('english', section || ' ' || content)) STORED,
    UNIQUE (document_id, ordinal)
);
CREATE INDEX kb_chunks_tsv ON kb_chunks USING gin (tsv);
CREATE INDEX kb_chunks_kb ON kb_chunks (kb_id);
-- the word vector stays inline (full text ranks from the heap row alone, no TOAST reads);
-- the embedding goes out of line (below)
ALTER TABLE kb_chunks ALTER COLUMN tsv SET STORAGE MAIN;

-- How many passages of a knowledge base hold each word (lexeme): full-text search matches on
-- the question's rarest words, so its cost stays bounded however common the others are.
CREATE TABLE kb_terms (
    kb_id   bigint  NOT NULL REFERENCES kb_bases (id),
    lexeme  text    NOT NULL,
    ndoc    integer NOT NULL,
    PRIMARY KEY (kb_id, lexeme)
);

-- The vector column and its index only where the server ships pgvector (the embedded
-- PostgreSQL does); elsewhere retrieval is full-text only and start-up and `doctor` say so.
-- The HNSW index covers the built-in 256-dimension embedder; other dimensions are scanned.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'pgvector is available but this role may not create it: full-text retrieval only';
            RETURN;
        END;
        ALTER TABLE kb_chunks ADD COLUMN embedding vector;
        ALTER TABLE kb_chunks ALTER COLUMN embedding SET STORAGE EXTERNAL;
        -- half precision (pgvector 0.7+): half the index size, the same neighbours for
        -- ranking; an older pgvector gets the full-precision index
        IF (SELECT string_to_array(extversion, '.')::int[] FROM pg_extension
            WHERE extname = 'vector') >= ARRAY[0, 7] THEN
            CREATE INDEX kb_chunks_embedding_256h ON kb_chunks
                USING hnsw ((embedding::halfvec(256)) halfvec_cosine_ops) WHERE dims = 256;
        ELSE
            CREATE INDEX kb_chunks_embedding_256 ON kb_chunks
                USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE dims = 256;
        END IF;
    END IF;
END
$$;

-- Operator knowledge bases assigned to chats: a chat (platform, scope, chat id) searches its
-- threads' documents, its own knowledge base, every base assigned to it, and `default` (unless
-- GATEWAY_KB_DEFAULT=assigned, when `default` too must be assigned).
CREATE TABLE kb_assignments (
    kb_id       bigint      NOT NULL REFERENCES kb_bases (id) ON DELETE CASCADE,
    platform    text        NOT NULL,
    scope       text        NOT NULL,
    chat_id     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform, scope, chat_id, kb_id)
);
CREATE INDEX kb_assignments_kb ON kb_assignments (kb_id);

-- Citations frozen with the answer: written in the same transaction as the assistant message,
-- from its metadata, and never changed (a deleted document keeps its earlier citations).
CREATE TABLE answer_citations (
    message_id    bigint           NOT NULL REFERENCES messages (id),
    ordinal       integer          NOT NULL,
    document_id   bigint           NOT NULL,
    chunk_id      bigint           NOT NULL,
    document_name text             NOT NULL,
    page          integer,
    section       text             NOT NULL DEFAULT '',
    passage       text             NOT NULL,
    score         double precision NOT NULL,
    created_at    timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, ordinal)
);

CREATE FUNCTION freeze_citations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO answer_citations
        (message_id, ordinal, document_id, chunk_id, document_name, page, section, passage, score)
    SELECT NEW.id, c.ordinal, c.document_id, c.chunk_id, c.document_name, c.page,
           coalesce(c.section, ''), c.passage, c.score
    FROM jsonb_to_recordset(NEW.metadata->'citations') AS c (
        ordinal integer, document_id bigint, chunk_id bigint, document_name text,
        page integer, section text, passage text, score double precision);
    INSERT INTO session_links (session_id, link_type, target_ref, relation)
    SELECT DISTINCT NEW.session_id, 'doc', 'kb-document:' || c.document_id, 'evidence'
    FROM jsonb_to_recordset(NEW.metadata->'citations') AS c (document_id bigint)
    WHERE c.document_id IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM session_links l
          WHERE l.session_id = NEW.session_id AND l.link_type = 'doc'
            AND l.target_ref = 'kb-document:' || c.document_id AND l.relation = 'evidence');
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_freeze_citations AFTER INSERT ON messages
    FOR EACH ROW WHEN (jsonb_typeof(NEW.metadata->'citations') = 'array')
    EXECUTE FUNCTION freeze_citations();

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

-- The shared pacing budget: per key (a bot and chat), the time its calls so far have paced it
-- up to (GCRA's theoretical arrival time; see pace_reserve). Unlogged: losing it in a crash
-- only forgets some spacing.
CREATE UNLOGGED TABLE pace_slots (
    key     text        PRIMARY KEY,
    next_at timestamptz NOT NULL
);

-- Reserve the next slot under (key, min interval, burst) rules: returns the seconds to wait
-- before the call. GCRA: next_at is the key's theoretical arrival time, and a call may start
-- once that is at most (burst - 1) intervals ahead (a burst of 1: plain spacing). When the
-- wait is over max_wait nothing is reserved (the caller skips: a preview edit that would come
-- too late is left out, the next one carries more text).
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

-- The form without bursts (migration 0008), kept for a process of the previous release during
-- a rolling upgrade: every key with a burst of 1.
CREATE FUNCTION pace_reserve(keys text[], intervals double precision[],
                             max_wait double precision)
RETURNS double precision LANGUAGE sql AS $$
    SELECT pace_reserve(keys, intervals, array_fill(1, ARRAY[cardinality(keys)]), max_wait)
$$;

-- People, the usage ledger and budgets (migration 0017).
CREATE TABLE people (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    merged_into bigint REFERENCES people (id),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE person_accounts (
    account    text        PRIMARY KEY,
    person_id  bigint      NOT NULL REFERENCES people (id),
    linked_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX person_accounts_person ON person_accounts (person_id);

-- /link: a one-time code for the account that asked, valid for ten minutes
CREATE TABLE link_codes (
    code       text        PRIMARY KEY,
    account    text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The person an account belongs to, created on first sight. Each statement in a volatile
-- function takes a fresh snapshot, so an account inserted by a concurrent call is seen after
-- ON CONFLICT waited for it.
CREATE FUNCTION person_of(acct text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    pid bigint;
BEGIN
    IF acct IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT person_id INTO pid FROM person_accounts WHERE account = acct;
    IF pid IS NOT NULL THEN
        RETURN pid;
    END IF;
    INSERT INTO people DEFAULT VALUES RETURNING id INTO pid;
    INSERT INTO person_accounts (account, person_id) VALUES (acct, pid)
    ON CONFLICT (account) DO NOTHING;
    SELECT person_id INTO pid FROM person_accounts WHERE account = acct;
    RETURN pid;
END;
$$;

-- The price sets in force over time: a change of [prices] is a new version; ledger rows keep
-- the version they were priced with.
CREATE TABLE price_sets (
    version    integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    digest     text        NOT NULL,
    -- model -> {"input": "...", "output": "..."} per million tokens, an object
    prices     jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT price_sets_prices_object CHECK (jsonb_typeof(prices) = 'object')
);

-- The usage ledger: one row per model call (answers, tool steps, summaries). account is who
-- is charged (NULL: the place, for summaries); person_id is that account's person when the
-- call was made (sums follow the account's person now).
CREATE TABLE usage_ledger (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                timestamptz NOT NULL DEFAULT now(),
    account           text,
    person_id         bigint,
    place             text        NOT NULL,
    session_id        bigint,
    message_id        bigint,
    model             text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('answer', 'tool_step', 'summary')),
    prompt_tokens     integer     NOT NULL DEFAULT 0,
    completion_tokens integer     NOT NULL DEFAULT 0,
    cost              numeric,
    price_version     integer
);
CREATE INDEX usage_ledger_at ON usage_ledger (at);
CREATE INDEX usage_ledger_account_at ON usage_ledger (account, at);
CREATE INDEX usage_ledger_place_at ON usage_ledger (place, at);

-- Over budget, the asker is told once per limit, subject (person or place) and period.
CREATE TABLE budget_notices (
    limit_name   text        NOT NULL,
    subject      text        NOT NULL,
    place        text        NOT NULL,
    period_start timestamptz NOT NULL,
    noticed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (limit_name, subject, place, period_start)
);

-- The model a person chose with /model, for every account of theirs (the older
-- user_model_choices stays the answer for an account whose person chose nothing).
CREATE TABLE person_model_choices (
    person_id  bigint      PRIMARY KEY REFERENCES people (id),
    model      text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- Schedules (0018): questions asked in a place at a time or on a cron expression, and
-- each firing once (the unique (schedule_id, due_at) is the fence).
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
-- Per-model circuit breakers shared by every replica (migration 0020).
CREATE TABLE model_breakers (
    model         text PRIMARY KEY,
    failures      integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    open_until    timestamptz,
    opened_at     timestamptz,
    last_cause    text,
    last_error    text,
    last_error_at timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
-- The audit log (migration 0022): append-only, partitioned by month of `at`.
CREATE TABLE audit_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL DEFAULT now(),
    -- who: 'admin:token', 'admin:local', 'web:<name>', '<platform>:<user id>', 'cli:<os user>',
    -- 'system'
    actor       text        NOT NULL,
    -- a dotted name: 'kb.document.delete', 'web.sign_in', 'tool.approval.decide'
    action      text        NOT NULL,
    object_type text,
    object_id   text,
    outcome     text        NOT NULL CHECK (outcome IN ('ok', 'denied', 'failed')),
    reason      text,
    -- where from: the client's address (if any) and the surface ('api', 'mcp', 'ops', 'web',
    -- 'cli', a platform name)
    remote_addr text,
    surface     text        NOT NULL,
    details     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);

CREATE INDEX audit_events_at ON audit_events (at DESC, id DESC);
CREATE INDEX audit_events_actor ON audit_events (actor, id DESC);
CREATE INDEX audit_events_action ON audit_events (action, id DESC);

CREATE FUNCTION audit_events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused (retention drops whole months)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();

-- The month partitions from the month of `since` to `ahead` months after it (idempotent).
CREATE FUNCTION audit_ensure_partitions(since timestamptz, ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    month date := date_trunc('month', since AT TIME ZONE 'UTC')::date;
    made integer := 0;
    name text;
BEGIN
    FOR i IN 0..ahead LOOP
        name := 'audit_events_' || to_char(month, 'YYYY_MM');
        IF to_regclass(name) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)',
                name,
                (month::timestamp AT TIME ZONE 'UTC'),
                ((month + interval '1 month')::timestamp AT TIME ZONE 'UTC')
            );
            made := made + 1;
        END IF;
        month := (month + interval '1 month')::date;
    END LOOP;
    RETURN made;
END
$$;

SELECT audit_ensure_partitions(now(), 2);

-- Files a surface keeps itself because its platform has nowhere to fetch them from later (the
-- web chat's voice notes).
CREATE TABLE held_files (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    media_type text,
    size_bytes integer     NOT NULL,
    content    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Erasure of one person (migration 0030): the step each request reached and how far, so a
-- run killed half way is finished by the next one.
CREATE TABLE erasure_jobs (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    person_id   bigint      NOT NULL,
    people      bigint[]    NOT NULL,
    accounts    text[]      NOT NULL,
    step        text        NOT NULL DEFAULT 'inbound',
    position    bigint      NOT NULL DEFAULT 0,
    documents   bigint[]    NOT NULL DEFAULT '{}',
    counts      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE UNIQUE INDEX erasure_jobs_open ON erasure_jobs (person_id) WHERE finished_at IS NULL;

-- One reload for every replica (migration 0033): a request names the replicas live when it was
-- made; each reads its config file again and reports what it loaded, or why it kept its own.
CREATE TABLE config_reloads (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    requested_at timestamptz NOT NULL DEFAULT now(),
    actor        text        NOT NULL,
    path         text,
    replicas     integer[]   NOT NULL
);
CREATE INDEX config_reloads_requested ON config_reloads (requested_at);

CREATE TABLE config_reload_reports (
    reload_id   bigint      NOT NULL REFERENCES config_reloads (id) ON DELETE CASCADE,
    process_id  integer     NOT NULL,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('reloaded', 'failed')),
    path        text,
    sha256      text,
    error       text,
    reported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (reload_id, process_id)
);
