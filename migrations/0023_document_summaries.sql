-- A stored summary of each ready document, written by the agent's model on the cold path
-- (gateway/knowledge/summaries.py) and given to a question about the whole document when the
-- document does not fit the prompt. summary_due_at is also the claim's lease: a claim moves it
-- a lease ahead and counts a try, so a worker that dies mid-summary leaves the document to be
-- claimed again once that time passes. A new text (reindex) clears the summary.
ALTER TABLE kb_documents
    ADD COLUMN summary        text,
    ADD COLUMN summary_model  text,
    ADD COLUMN summary_tries  integer     NOT NULL DEFAULT 0,
    ADD COLUMN summary_due_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN summary_error  text;
-- the documents still due one: small however many documents have theirs (3: the tries)
CREATE INDEX kb_documents_summary_due ON kb_documents (summary_due_at, id)
    WHERE state = 'ready' AND summary IS NULL AND summary_tries < 3;
