-- The W3C trace context (``traceparent``) of the inbound message a row belongs to, written
-- only while tracing is on (gateway/core/tracing.py): the turn that answers a message and the
-- sends of its answer join the message's trace, whichever replica runs them, after a restart
-- too. NULL when tracing is off or for rows written before.
ALTER TABLE messages ADD COLUMN traceparent text;
ALTER TABLE deliveries ADD COLUMN traceparent text;
