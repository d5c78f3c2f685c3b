
-- Issue 6, the agent runtime: sticky model choice and feedback.

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
