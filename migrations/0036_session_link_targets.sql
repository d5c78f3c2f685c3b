-- Session links name what they point at: a link_type (law, doc, task, collection, issue,
-- report, artifact) and a target_ref (an id, a path or a URL in that kind's terms), with a
-- relation (input, evidence, output, related, supersedes). Nothing wrote this table before.
ALTER TABLE session_links
    ADD COLUMN link_type  text,
    ADD COLUMN target_ref text;
ALTER TABLE session_links ADD CONSTRAINT session_links_link_type
    CHECK (link_type IN ('law', 'doc', 'task', 'collection', 'issue', 'report', 'artifact'));
ALTER TABLE session_links ADD CONSTRAINT session_links_relation
    CHECK (relation IN ('input', 'evidence', 'output', 'related', 'supersedes'));
