"""Documents and retrieval: parse, chunk, embed, ingest jobs, hybrid search, frozen citations.

All SQL lives in ``session_store.repos.knowledge``; this package is the surface-agnostic core."""
