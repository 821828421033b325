#!/usr/bin/env bash
# A throwaway PostgreSQL server on this machine, on 127.0.0.1 only: what the cluster tests run
# against, and a way to try `hydra.sweeper.storage=postgresql+psycopg://...` without a database
# host. (A one-node SLURM cluster is not here yet: see README "One study from several machines".)
#
#   scripts/local_cluster.sh start [postgres]             # prints the env to use; eval "$(...)"
#   scripts/local_cluster.sh status
#   scripts/local_cluster.sh stop                         # stops what start started, deletes DIR
#
# DIR is $QKNORM_CLUSTER_DIR (default /tmp/qknorm-cluster-$UID); it holds the data, the logs and
# `env`. PostgreSQL refuses to run as root: as root the server runs as the `postgres` user.
set -euo pipefail

DIR="${QKNORM_CLUSTER_DIR:-/tmp/qknorm-cluster-$(id -u)}"
PG="$DIR/postgres"
WAIT_S=30  # every wait below gives up after this many seconds

die() { echo "error: $*" >&2; exit 2; }

as_pg() {  # run a PostgreSQL binary as the server's user
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pg_bin() {  # initdb/pg_ctl on PATH, else Debian's versioned directory
    command -v "$1" 2>/dev/null || ls /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | tail -n 1
}

start_postgres() {
    local initdb pg_ctl port
    initdb=$(pg_bin initdb); pg_ctl=$(pg_bin pg_ctl)
    [ -n "$initdb" ] && [ -n "$pg_ctl" ] || die "initdb/pg_ctl not found; install PostgreSQL (apt-get install postgresql)"
    if [ -f "$PG/port" ]; then echo "postgres: already running on port $(cat "$PG/port")" >&2; return; fi
    mkdir -p "$PG/data" "$PG/socket"
    if [ "$(id -u)" = 0 ]; then chown -R postgres "$PG"; fi
    as_pg "$initdb" -D "$PG/data" --auth=trust --username=postgres >"$PG/initdb.log" 2>&1 \
        || die "initdb failed; see $PG/initdb.log"
    port=$(free_port)
    # 127.0.0.1 only; the socket in DIR (the system's socket dir may not exist or be writable).
    as_pg "$pg_ctl" -D "$PG/data" -l "$PG/server.log" -w -t "$WAIT_S" \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $PG/socket -c fsync=off" start >/dev/null \
        || die "PostgreSQL did not start; see $PG/server.log"
    as_pg "$(pg_bin createdb)" -h 127.0.0.1 -p "$port" -U postgres qknorm
    echo "$port" >"$PG/port"
}

stop_postgres() {
    [ -d "$PG/data" ] || return 0
    as_pg "$(pg_bin pg_ctl)" -D "$PG/data" -m immediate -w -t "$WAIT_S" stop >/dev/null 2>&1 || true
    rm -f "$PG/port"
}

print_env() {
    [ -f "$PG/port" ] && echo "export QKNORM_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$(cat "$PG/port")/qknorm"
    return 0
}

what="${2:-all}"
case "${1:-}" in
    start)
        mkdir -p "$DIR"; chmod 755 "$DIR"  # the postgres user must reach its data dir
        case "$what" in
            postgres|all) start_postgres ;;
            *) die "start $what: pick postgres (or all)" ;;
        esac
        print_env | tee "$DIR/env" ;;
    status)
        if [ -f "$PG/port" ]; then as_pg "$(pg_bin pg_ctl)" -D "$PG/data" status | head -n 1
        else echo "postgres: not running (DIR=$DIR)"; fi
        print_env ;;
    stop)
        stop_postgres
        rm -rf "$DIR" ;;
    *) die "usage: $0 start [postgres] | status | stop" ;;
esac
