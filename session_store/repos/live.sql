-- Live events between replicas over LISTEN/NOTIFY.

-- name: others_listening
-- a listening connection of another replica is open on this database
SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1
               AND datname = current_database() AND pid <> $2)

-- name: notify
SELECT pg_notify($1, $2)

-- name: notify_many
-- several payloads in one statement, in order
SELECT pg_notify($1, p) FROM unnest($2::text[]) WITH ORDINALITY AS t(p, n) ORDER BY n

-- name: ping
SELECT 1
