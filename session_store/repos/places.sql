-- Which platforms and places the gateway has seen: a session is kept for every place a
-- message came from (or a first post went to). Each answer is one probe of the sessions_key
-- index (platform, scope, chat_id, thread_id).

-- name: platform_seen
SELECT EXISTS (SELECT 1 FROM sessions WHERE platform = $1)

-- name: place_seen
-- the chat (any of its threads), and the exact thread when one is given
SELECT EXISTS (SELECT 1 FROM sessions WHERE platform = $1 AND scope = $2 AND chat_id = $3)
           AS chat_seen,
       $4::text IS NULL OR EXISTS (
           SELECT 1 FROM sessions
           WHERE platform = $1 AND scope = $2 AND chat_id = $3 AND thread_id = $4
       ) AS thread_seen
