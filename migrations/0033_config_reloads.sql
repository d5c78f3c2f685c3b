-- One reload for every replica (`gateway reload`, POST /api/v1/reload): a request row names the
-- replicas (gateway_processes ids) live when it was made; each of them reads its config file
-- again and writes its report: what it loaded (path, SHA-256) or why it kept what it had.
CREATE TABLE config_reloads (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    requested_at timestamptz NOT NULL DEFAULT now(),
    -- who asked (the audit log's actor)
    actor        text        NOT NULL,
    -- the file the requester means (its GATEWAY_CONFIG_FILE, resolved); null: each its own
    path         text,
    -- the replicas asked
    replicas     integer[]   NOT NULL
);
CREATE INDEX config_reloads_requested ON config_reloads (requested_at);

CREATE TABLE config_reload_reports (
    reload_id   bigint      NOT NULL REFERENCES config_reloads (id) ON DELETE CASCADE,
    process_id  integer     NOT NULL,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    -- reloaded | failed (the previous config stays in force)
    outcome     text        NOT NULL CHECK (outcome IN ('reloaded', 'failed')),
    path        text,
    sha256      text,
    error       text,
    reported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (reload_id, process_id)
);
