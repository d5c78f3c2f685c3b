#!/usr/bin/env sh
# Back up the gateway's database into one file (pg_dump's custom format), while it runs.
#   DATABASE_URL=postgresql://... sh backup.sh [FILE]     an external PostgreSQL
#   GATEWAY_DATA_DIR=/var/lib/chat-gateway sh backup.sh [FILE]    the embedded one
set -eu
. "$(dirname "$0")/pg.sh"
file=${1:-gateway-$(date -u +%Y%m%dT%H%M%SZ).dump}
pg_tool pg_dump --format=custom --no-owner --file="$file"
echo "$file"
