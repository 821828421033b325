#!/usr/bin/env bash
# A throwaway PostgreSQL server and a one-node SLURM cluster with accounting (slurmdbd on a
# throwaway MariaDB: `sacct`, and so submitit, need it to see a job end), on 127.0.0.1 only:
# what the cluster tests run against, and a way to try `hydra.sweeper.storage=postgresql+...`
# or `hydra/launcher=slurm` without a database host or a cluster.
#
#   tests/local_cluster.sh start [postgres|slurm|all]   # prints the env to use; eval "$(...)"
#   tests/local_cluster.sh status
#   tests/local_cluster.sh stop                         # stops what start started, deletes DIR
#
# DIR is $QKNORM_CLUSTER_DIR (default /tmp/qknorm-cluster-$UID); it holds the data, the logs and
# `env`. PostgreSQL refuses to run as root: as root the server runs as the `postgres` user;
# MariaDB likewise runs as the `mysql` user.
set -euo pipefail

DIR="${QKNORM_CLUSTER_DIR:-/tmp/qknorm-cluster-$(id -u)}"
PG="$DIR/postgres"
SL="$DIR/slurm"
DB="$SL/mariadb"  # slurmdbd's database
WAIT_S=30  # every wait below gives up after this many seconds

die() { echo "error: $*" >&2; exit 2; }

as_pg() {  # run a PostgreSQL binary as the server's user
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

all_cpus() {  # nproc honours OMP_NUM_THREADS, which the test workers set to 1
    env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc
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

start_mariadb() {  # a private datadir, socket and 127.0.0.1 port; a `slurm` user for slurmdbd
    local port end
    command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null \
        || die "mariadbd not found; install it (apt-get install mariadb-server)"
    mkdir -p "$DB"; chown mysql "$DB"
    # No binlog, no fsync per commit: a database that lives for one session. The buffer pool
    # and lock wait are the sizes slurmdbd asks for (else it logs an error).
    local opts=(--no-defaults --datadir="$DB/data" --user=mysql --skip-name-resolve
                --skip-log-bin --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0
                --innodb-buffer-pool-size=1G --innodb-lock-wait-timeout=900)
    mariadb-install-db "${opts[@]}" --auth-root-authentication-method=socket --skip-test-db \
        >"$DB/install.log" 2>&1 || die "mariadb-install-db failed; see $DB/install.log"
    port=$(free_port)
    # mariadbd stays in the foreground: detach it, its output to its log, not our caller's pipe.
    setsid mariadbd "${opts[@]}" --socket="$DB/mysqld.sock" --port="$port" \
        --bind-address=127.0.0.1 --pid-file="$DB/mariadbd.pid" --log-error="$DB/mariadbd.log" \
        </dev/null >/dev/null 2>&1 &
    end=$((SECONDS + WAIT_S))
    until mariadb-admin --no-defaults --socket="$DB/mysqld.sock" -u root ping >/dev/null 2>&1; do
        ((SECONDS < end)) || die "MariaDB did not start; see $DB/mariadbd.log"
        sleep 0.1
    done
    DB_PORT=$port
    DB_PASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
    mariadb --no-defaults --socket="$DB/mysqld.sock" -u root -e "
        CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "MariaDB: cannot add user slurm"
}

write_slurmdbd_conf() {  # slurmdbd reads it next to $SLURM_CONF; it must be 600, the SlurmUser's
    (umask 077; cat >"$SL/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$SL/munge/munge.socket.2
DbdHost=$(hostname -s)
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$(id -un)
PidFile=$SL/slurmdbd.pid
LogFile=$SL/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    )
}

start_slurmdbd() {  # then register the cluster, so that slurmctld can record its jobs
    local end=$((SECONDS + WAIT_S))
    write_slurmdbd_conf
    SLURM_CONF="$SL/slurm.conf" slurmdbd || die "slurmdbd did not start; see $SL/slurmdbd.log"
    # It creates its tables on the first start, then answers.
    until SLURM_CONF="$SL/slurm.conf" sacctmgr -n list cluster >/dev/null 2>&1; do
        ((SECONDS < end)) || die "slurmdbd never answered; see $SL/slurmdbd.log"
        sleep 0.2
    done
    SLURM_CONF="$SL/slurm.conf" sacctmgr -i add cluster qknorm >/dev/null \
        || die "sacctmgr add cluster failed; see $SL/slurmdbd.log"
}

write_slurm_conf() {  # one node (this host, its CPUs), accounting by slurmdbd, no cgroups (no systemd)
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
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$SL/munge/munge.socket.2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(all_cpus) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_slurm() {
    local bin
    for bin in slurmctld slurmdbd munged; do
        command -v "$bin" >/dev/null \
            || die "$bin not found; install SLURM (apt-get install slurm-wlm slurmdbd munge)"
    done
    [ "$(id -u)" = 0 ] || die "the local SLURM cluster runs its daemons as root; run start slurm as root"
    if [ -f "$SL/slurmctld.pid" ]; then echo "slurm: already running" >&2; return; fi
    mkdir -p "$SL/state" "$SL/spool" "$SL/munge"
    # munged: its own key and socket in DIR, run as the munge user (it refuses root).
    dd if=/dev/urandom of="$SL/munge/munge.key" bs=1024 count=1 status=none
    chown -R munge:munge "$SL/munge"; chmod 711 "$SL/munge"; chmod 400 "$SL/munge/munge.key"
    runuser -u munge -- munged --socket="$SL/munge/munge.socket.2" --key-file="$SL/munge/munge.key" \
        --pid-file="$SL/munge/munged.pid" --log-file="$SL/munge/munged.log" \
        --seed-file="$SL/munge/munged.seed" || die "munged did not start; see $SL/munge/munged.log"
    DBD_PORT=$(free_port)
    write_slurm_conf
    start_mariadb
    start_slurmdbd
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
    local f pid pids=() i
    # All at once (each takes a second or two to exit), as DIR and its database go next; but
    # wait for each to exit: slurmctld saves its state as it exits, or DIR goes under its feet.
    for f in "$SL/slurmd.pid" "$SL/slurmctld.pid" "$SL/slurmdbd.pid" "$DB/mariadbd.pid" \
        "$SL/munge/munged.pid"; do
        [ -f "$f" ] && pid=$(cat "$f") && kill "$pid" 2>/dev/null && pids+=("$pid")
    done
    for pid in "${pids[@]}"; do
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
