#!/usr/bin/env sh
# The admin API with curl. GATEWAY_URL is where the gateway serves (http://127.0.0.1:8080);
# GATEWAY_ADMIN_TOKEN is the bearer token (without one, only loopback clients are answered).
set -eu
auth="Authorization: Bearer $GATEWAY_ADMIN_TOKEN"

# the newest sessions, five per page (follow next_cursor for more)
curl -fsS -H "$auth" "$GATEWAY_URL/api/v1/sessions?limit=5"

# counts: sessions, messages, deliveries by status
curl -fsS -H "$auth" "$GATEWAY_URL/api/v1/stats"

# replies that failed to deliver
curl -fsS -H "$auth" "$GATEWAY_URL/api/v1/deliveries?status=failed"

# full-text search across every session
curl -fsS -H "$auth" "$GATEWAY_URL/api/v1/search?q=deploy"

# the API's OpenAPI document
curl -fsS "$GATEWAY_URL/openapi.json" -o openapi.json
