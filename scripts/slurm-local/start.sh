#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests of 004's slurm executor (tests/test_ab_cluster.py):
# munged, MariaDB and slurmdbd (sacct reads accounting from it; submitit asks sacct for job states), slurmctld and
# slurmd, all under $COMPOSER_SLURM_DIR (default /tmp/composer-slurm), with the configuration beside this script.
# As root, with Debian's packages:   apt-get install slurm-wlm slurmdbd munge mariadb-server
#   scripts/slurm-local/start.sh          # idempotent: a running cluster is left as it is
#   export SLURM_CONF=/tmp/composer-slurm/slurm.conf; sinfo; sbatch --wrap hostname; sacct
#   scripts/slurm-local/start.sh stop
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${COMPOSER_SLURM_DIR:-/tmp/composer-slurm}"
export SLURM_CONF="$dir/slurm.conf"

stop() {
  for pidfile in slurmd slurmctld slurmdbd; do
    [ -f "$dir/$pidfile.pid" ] && kill "$(cat "$dir/$pidfile.pid")" 2>/dev/null || true
  done
  [ -f "$dir/mysql.pid" ] && kill "$(cat "$dir/mysql.pid")" 2>/dev/null || true
  [ -f "$dir/munged.pid" ] && kill "$(cat "$dir/munged.pid")" 2>/dev/null || true
}
if [ "${1:-}" = stop ]; then stop; exit 0; fi

[ "$(id -u)" = 0 ] || { echo "start.sh: runs the daemons as root (a test cluster); run it as root" >&2; exit 2; }
for tool in munged slurmctld slurmd slurmdbd mariadbd; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
    echo "start.sh: $tool is missing: apt-get install slurm-wlm slurmdbd munge mariadb-server" >&2; exit 2; }
done
if sinfo -h -o %T 2>/dev/null | grep -qx idle; then echo "SLURM_CONF=$SLURM_CONF (already running)"; exit 0; fi
stop
mkdir -p "$dir"/{state,spool,log,mysql} /run/munge /run/mysqld
host="$(hostname -s)"
cpus="$(nproc)"
memory_mb="$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))"
sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|$host|g" -e "s|@CPUS@|$cpus|g" -e "s|@MEMORY_MB@|$memory_mb|g" \
  "$here/slurm.conf.in" > "$dir/slurm.conf"
sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|$host|g" "$here/slurmdbd.conf.in" > "$dir/slurmdbd.conf"
chmod 600 "$dir/slurmdbd.conf"

wait_for() {  # wait_for WHAT SECONDS COMMAND...: poll until COMMAND succeeds
  local what="$1" seconds="$2"; shift 2
  for _ in $(seq "$((seconds * 4))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  echo "start.sh: $what did not come up in ${seconds}s; its log: $dir/log/" >&2; exit 1
}

# munge: the key the package made (or a new one)
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key
chmod 400 /etc/munge/munge.key
munged --force --pid-file "$dir/munged.pid" --log-file "$dir/log/munged.log"  # as root, like the other daemons
wait_for munged 10 bash -c "munge -n | unmunge"

# MariaDB for slurmdbd: its own data folder; the default socket, the only one 22.05's slurmdbd connects to
if [ ! -d "$dir/mysql/mysql" ]; then
  mariadb-install-db --user=root --datadir="$dir/mysql" --auth-root-authentication-method=socket >"$dir/log/mysql-install.log" 2>&1
fi
mariadbd --user=root --datadir="$dir/mysql" --socket=/run/mysqld/mysqld.sock --pid-file="$dir/mysql.pid" \
  --skip-networking --log-error="$dir/log/mysql.log" &
wait_for mariadb 30 mariadb --socket=/run/mysqld/mysqld.sock -e "select 1"
mariadb --socket=/run/mysqld/mysqld.sock -e "create database if not exists slurm_acct_db;
  create user if not exists 'slurm'@'localhost' identified by 'composer';
  grant all on slurm_acct_db.* to 'slurm'@'localhost';"

slurmdbd 2>>"$dir/log/slurmdbd.err"
wait_for slurmdbd 30 sacctmgr -i list cluster
sacctmgr -i add cluster composer >/dev/null 2>&1 || true
slurmctld -f "$dir/slurm.conf" 2>>"$dir/log/slurmctld.err"
slurmd -f "$dir/slurm.conf" 2>>"$dir/log/slurmd.err"
wait_for "the node" 60 bash -c "sinfo -h -o %T | grep -qx idle"
echo "SLURM_CONF=$SLURM_CONF"
