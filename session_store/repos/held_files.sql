-- Files a surface keeps itself (the web chat's voice notes).

-- name: keep_file
INSERT INTO held_files (name, media_type, size_bytes, content) VALUES ($1, $2, $3, $4)
RETURNING id

-- name: read_file
-- NULL content past $2 bytes: the caller says it is too big without loading it
SELECT size_bytes, CASE WHEN size_bytes <= $2 THEN content END AS content
FROM held_files WHERE id = $1
