#!/usr/bin/env sh
# Restore a dump made by backup.sh. Stop every gateway process first. Objects the dump holds
# are dropped and recreated (--clean), all in one transaction: a failure changes nothing.
#   DATABASE_URL=postgresql://... sh restore.sh FILE
#   GATEWAY_DATA_DIR=/var/lib/chat-gateway sh restore.sh FILE
set -eu
. "$(dirname "$0")/pg.sh"
pg_tool pg_restore --clean --if-exists --no-owner --single-transaction --exit-on-error "$1"
