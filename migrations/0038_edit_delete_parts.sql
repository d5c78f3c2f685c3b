-- Edits and deletions of a person's message reach the bot's answer through the outbox: an
-- answer rewritten in place (edit_message: the platform message of an earlier part edited to
-- the new text) and an answer retracted (delete_message: that message deleted). Both name the
-- earlier delivery in their part document; what they change is found at delivery time.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_kind_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_kind_check
    CHECK (kind IN ('text', 'file', 'approval_card', 'edit_message', 'delete_message'));
