"""The approval card's delivery row: outbox SQL, kept apart from the tools area's own SQL
(``tool_store.sql``) until it moves into the outbox repository with the outbox's other
statements."""

# The card is a message of the session (seq-numbered, not conversation: model 'command' keeps
# it out of the agent's context) and a delivery row with the request's stored target.
INSERT_CARD_DELIVERY = """
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                        kind, part, traceparent)
VALUES ($1, $2, $3, 1, $4, $5, $6, 'approval_card',
        jsonb_build_object('v', 1, 'approval_id', $7::text), $8)
"""
