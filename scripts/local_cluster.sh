#!/usr/bin/env bash
# A throwaway PostgreSQL server and a one-node SLURM cluster on this machine, on 127.0.0.1 only:
# what the cluster tests run against, and a way to try `hydra.sweeper.storage=postgresql+...`
# or `hydra/launcher=slurm` without a database host or a cluster.
#
#   scripts/local_cluster.sh start [postgres|slurm|all]   # prints the env to use; eval "$(...)"
#   scripts/local_cluster.sh status
#   scripts/local_cluster.sh stop                         # stops what start started, deletes DIR
#
# DIR is $QKNORM_CLUSTER_DIR (default /tmp/qknorm-cluster-$UID); it holds the data, the logs and
# `env`. PostgreSQL refuses to run as root: as root the server runs as the `postgres` user.
set -euo pipefail

DIR="${QKNORM_CLUSTER_DIR:-/tmp/qknorm-cluster-$(id -u)}"
PG="$DIR/postgres"
SL="$DIR/slurm"
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

write_slurm_conf() {  # one node (this host, its CPUs), no accounting, no cgroups (no systemd)
    local host mem
    host=$(hostname -s)
    mem=$(awk '/MemTotal/ {print int($2 / 1024) - 1024}' /proc/meminfo)
    cat >"$SL/slurm.conf" <<EOF
ClusterName=qknorm
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$SL/munge/munge.socket.2
CredType=cred/munge
SlurmUser=$(id -un)
StateSaveLocation=$SL/state
SlurmdSpoolDir=$SL/spool
SlurmctldPidFile=$SL/slurmctld.pid
SlurmdPidFile=$SL/slurmd.pid
SlurmctldLogFile=$SL/slurmctld.log
SlurmdLogFile=$SL/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_slurm() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null \
        || die "slurmctld/munged not found; install them (apt-get install slurm-wlm munge)"
    [ "$(id -u)" = 0 ] || die "the local SLURM cluster runs its daemons as root; run start slurm as root"
    if [ -f "$SL/slurmctld.pid" ]; then echo "slurm: already running" >&2; return; fi
    mkdir -p "$SL/state" "$SL/spool" "$SL/munge"
    # munged: its own key and socket in DIR, run as the munge user (it refuses root).
    dd if=/dev/urandom of="$SL/munge/munge.key" bs=1024 count=1 status=none
    chown -R munge:munge "$SL/munge"; chmod 711 "$SL/munge"; chmod 400 "$SL/munge/munge.key"
    runuser -u munge -- munged --socket="$SL/munge/munge.socket.2" --key-file="$SL/munge/munge.key" \
        --pid-file="$SL/munge/munged.pid" --log-file="$SL/munge/munged.log" \
        --seed-file="$SL/munge/munged.seed" || die "munged did not start; see $SL/munge/munged.log"
    write_slurm_conf
    slurmctld -f "$SL/slurm.conf" || die "slurmctld did not start; see $SL/slurmctld.log"
    slurmd -f "$SL/slurm.conf" || die "slurmd did not start; see $SL/slurmd.log"
    local i
    for ((i = 0; i < WAIT_S; i++)); do  # the node registers within seconds
        if SLURM_CONF="$SL/slurm.conf" sinfo -h -o %t 2>/dev/null | grep -qx idle; then return; fi
        sleep 1
    done
    die "the SLURM node never became idle; see $SL/slurmctld.log and $SL/slurmd.log"
}

stop_slurm() {
    local f pid i
    for f in "$SL/slurmd.pid" "$SL/slurmctld.pid" "$SL/munge/munged.pid"; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || continue
        # slurmctld saves its state as it exits: wait, or DIR is removed under its feet.
        for ((i = 0; i < WAIT_S * 10; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    rm -f "$SL/slurmctld.pid"
}

print_env() {
    [ -f "$PG/port" ] && echo "export QKNORM_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$(cat "$PG/port")/qknorm"
    [ -f "$SL/slurmctld.pid" ] && echo "export SLURM_CONF=$SL/slurm.conf"
    return 0
}

what="${2:-all}"
case "${1:-}" in
    start)
        mkdir -p "$DIR"; chmod 755 "$DIR"  # the postgres user must reach its data dir
        case "$what" in
            postgres) start_postgres ;;
            slurm) start_slurm ;;
            all) start_postgres; start_slurm ;;
            *) die "start $what: pick postgres, slurm or all" ;;
        esac
        print_env | tee "$DIR/env" ;;
    status)
        if [ -f "$PG/port" ]; then as_pg "$(pg_bin pg_ctl)" -D "$PG/data" status | head -n 1
        else echo "postgres: not running (DIR=$DIR)"; fi
        if [ -f "$SL/slurmctld.pid" ]; then SLURM_CONF="$SL/slurm.conf" sinfo
        else echo "slurm: not running (DIR=$DIR)"; fi
        print_env ;;
    stop)
        stop_slurm
        stop_postgres
        rm -rf "$DIR" ;;
    *) die "usage: $0 start [postgres|slurm|all] | status | stop" ;;
esac
