#!/usr/bin/env bash
# CI check of sharded runs on a real SLURM cluster: starts a one-node cluster on this machine from
# Debian's packages (slurm-wlm, munge), writes the scripts of a 2-shard job array of
# configs/stories260k-smoke.yaml with `kvevict slurm`, submits them (the array, then the merge with
# --dependency=afterok), waits for both, runs the same config unsharded, and compares the merged run
# with it row for row (task, sample_key, policy, budget, prediction, score, kept_ratio, kv_bytes;
# not the timing columns). Exit 0 when they are equal, 1 on any difference or failure.
#
# The cluster: munged, slurmctld and slurmd started here as root in the background (no systemd, no
# cgroups: proctrack/linuxproc, task/none, select/cons_tres over CR_CPU with CPUs = nproc, no
# accounting), with their key, config, state, spool, sockets and logs in one temporary folder that
# is removed at the end (KVEVICT_SLURM_KEEP=1 keeps it). A trap cancels the jobs and stops the
# daemons on every exit path. Every wait is bounded and says what it was waiting for.
#
# Needs root (the daemons run as root) and build/kvevict (scripts/build.sh). Skips, exit 0 with the
# reason, when not root, when KVEVICT_SKIP_SLURM=1, or when ../shared lacks the stories260K model.
# Settings: KVEVICT_SLURM_PORT (slurmctld's port; slurmd takes the next one; default 16817),
# KVEVICT_SLURM_TIMEOUT (seconds the jobs may take, default 600).
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
say() { echo "slurm-ci: $*"; }
fail() {
  echo "slurm-ci: FAILED: $*" >&2
  exit 1
}

if [[ "${KVEVICT_SKIP_SLURM:-0}" == 1 ]]; then say "skipped (KVEVICT_SKIP_SLURM=1)"; exit 0; fi
if [[ "$(id -u)" -ne 0 ]]; then
  say "skipped: the one-node cluster runs munged, slurmctld and slurmd as root; run as root (CI does) or set KVEVICT_SKIP_SLURM=1"
  exit 0
fi
config=configs/stories260k-smoke.yaml
model=../shared/models/stories260K/stories260K.bin
if [[ ! -f "$model" ]]; then say "skipped: $model not found (the stories260K model in ../shared)"; exit 0; fi
kvevict="$PWD/build/kvevict"
[[ -x "$kvevict" ]] || fail "$kvevict not found: run scripts/build.sh first"

# Packages, the way scripts/setup.sh installs its own: only what is missing.
packages=(slurm-wlm munge sqlite3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  say "installing ${missing[*]}"
  apt-get update -qq
  # The packages' own service start is refused in a container (policy-rc.d) or harmless: this
  # script starts its daemons itself, with its own config.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

work=$(mktemp -d /tmp/kvevict-slurm.XXXXXX)
chmod 755 "$work"  # munged refuses a socket in a folder others cannot traverse
mkdir -p "$work/munge" "$work/state" "$work/spool"
pids=()     # daemons, in start order
jobs_submitted=()
stop_all() {
  local status=$?
  trap - EXIT
  if [[ ${#jobs_submitted[@]} -gt 0 ]]; then scancel "${jobs_submitted[@]}" 2> /dev/null || true; fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    local pid=${pids[i]}
    kill "$pid" 2> /dev/null || continue
    for _ in $(seq 20); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
  done
  if [[ $status -ne 0 ]]; then
    for log in "$work"/*.log "$work/jobs dir/logs/"*; do
      [[ -f "$log" ]] && { echo "----- $log (last 30 lines)"; tail -n 30 "$log"; }
    done
  fi
  if [[ "${KVEVICT_SLURM_KEEP:-0}" == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
  exit "$status"
}
trap stop_all EXIT

alive() { kill -0 "$1" 2> /dev/null || fail "$2 exited; its log is below"; }
# wait_until SECONDS WHAT COMMAND...: runs COMMAND each second until it succeeds, checking that the
# daemons still run; fails naming WHAT after SECONDS.
wait_until() {
  local limit=$1 what=$2
  shift 2
  for ((t = 0; t < limit; t++)); do
    "$@" && return 0
    for i in "${!pids[@]}"; do alive "${pids[i]}" "${names[i]}"; done
    sleep 1
  done
  fail "$what: not reached after ${limit}s"
}
names=()
start_daemon() {  # NAME COMMAND...: runs COMMAND in the foreground mode, in the background
  local name=$1
  shift
  "$@" > "$work/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
}

# munge: the credentials slurmctld and slurmd exchange.
head -c 1024 /dev/urandom > "$work/munge/munge.key"
chmod 400 "$work/munge/munge.key"
socket="$work/munge/munge.socket"
start_daemon munged munged --foreground --force --key-file="$work/munge/munge.key" --socket="$socket" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed" --log-file="$work/munged.log"
wait_until 30 "munged answering on $socket" bash -c "munge -S '$socket' -n | unmunge -S '$socket' > /dev/null 2>&1"

node=$(hostname -s)
port=${KVEVICT_SLURM_PORT:-16817}
export SLURM_CONF="$work/slurm.conf"
cat > "$SLURM_CONF" << EOF
ClusterName=kvevict-ci
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# A merge whose array failed is cancelled instead of pending forever.
SchedulerParameters=kill_invalid_depend
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
start_daemon slurmctld-stdout slurmctld -D -f "$SLURM_CONF"
wait_until 60 "slurmctld answering" bash -c "scontrol ping 2> /dev/null | grep -q UP"
start_daemon slurmd-stdout slurmd -D -f "$SLURM_CONF" -N "$node"
node_idle() { [[ "$(sinfo -h -n "$node" -o %T 2> /dev/null)" == idle ]]; }
wait_until 60 "node $node idle in sinfo" node_idle
cluster_up=$(date +%s)
say "one-node cluster up in $((cluster_up - started))s: $(sinfo -h -o '%P %a %D %T %c CPUs' | tr -s ' ')"

# The sharded run: the scripts of `kvevict slurm` in a folder with a space in its name.
jobs="$work/jobs dir"
"$kvevict" slurm "$config" --shards 2 --out "$jobs" --partition ci --time 10:00
submitted=$(bash "$jobs/submit.sh")
array_job=$(sed -n 's/^array_job=//p' <<< "$submitted")
merge_job=$(sed -n 's/^merge_job=//p' <<< "$submitted")
[[ -n "$array_job" && -n "$merge_job" ]] || fail "submit.sh printed no job ids: $submitted"
jobs_submitted=("$array_job" "$merge_job")
say "submitted array job $array_job (2 tasks) and merge job $merge_job (afterok:$array_job)"
wait_until "${KVEVICT_SLURM_TIMEOUT:-600}" "jobs $array_job and $merge_job done" bash -c "! squeue -h -j '$array_job,$merge_job' 2> /dev/null | grep -q ."
jobs_done=$(date +%s)
# Every task and the merge completed with exit code 0 (scontrol keeps finished jobs for MinJobAge, 300 s).
check_job() {  # ID EXPECTED_LINES
  local lines count=0
  lines=$(scontrol show job -o "$1") || fail "scontrol knows no job $1"
  while read -r line; do
    count=$((count + 1))
    [[ "$line" == *"JobState=COMPLETED"* && "$line" == *"ExitCode=0:0"* ]] ||
      fail "job $1: $(grep -o 'ArrayTaskId=[^ ]*\|JobState=[^ ]*\|Reason=[^ ]*\|ExitCode=[^ ]*' <<< "$line" | tr '\n' ' ')"
  done <<< "$lines"
  [[ $count -eq $2 ]] || fail "job $1: $count job records, expected $2"
}
check_job "$array_job" 2
check_job "$merge_job" 1
say "array and merge completed in $((jobs_done - cluster_up))s"

# The same config unsharded, and the comparison.
"$kvevict" eval -q -c "$config" --db "$work/whole.db"
# The compared columns of the finished whole run of database SCHEMA (main, or an attached one).
rows() {
  echo "SELECT r.task, r.sample_key, r.policy, r.budget, r.prediction, r.score, r.kept_ratio, r.kv_bytes
        FROM $1.results r JOIN $1.runs u ON u.id = r.run_id WHERE u.shard = '' AND u.status = 'finished'"
}
listing="SELECT task, sample_key, policy, budget, hex(prediction), printf('%.17g', score), printf('%.17g', kept_ratio),
         kv_bytes FROM ($(rows main)) ORDER BY 1, 2, 3, 4"
sqlite3 "$jobs/merged.db" "$listing" > "$work/merged.rows"
sqlite3 "$work/whole.db" "$listing" > "$work/whole.rows"
whole_rows=$(wc -l < "$work/whole.rows")
[[ $whole_rows -gt 0 ]] || fail "the unsharded run stored no results"
[[ "$(sqlite3 "$jobs/merged.db" "SELECT COUNT(*) FROM runs WHERE shard = ''")" == 1 ]] || fail "merged.db holds not exactly one whole run"
diff -u "$work/whole.rows" "$work/merged.rows" > "$work/rows.diff" || {
  head -n 40 "$work/rows.diff"
  fail "the merged run differs from the unsharded run (diff above: - unsharded, + merged)"
}
# Exact too: the listing prints doubles with at most 17 digits; the values themselves must be equal.
# (ATTACH by a relative name from $work: no path is pasted into the SQL.)
different=$(cd "$work" && sqlite3 "jobs dir/merged.db" "ATTACH DATABASE 'whole.db' AS w;
  SELECT COUNT(*) FROM ($(rows main)) a FULL OUTER JOIN ($(rows w)) b USING (task, sample_key, policy, budget)
  WHERE a.prediction IS NOT b.prediction OR a.score IS NOT b.score OR a.kept_ratio IS NOT b.kept_ratio
     OR a.kv_bytes IS NOT b.kv_bytes;")
[[ "$different" == 0 ]] || fail "$different rows differ between the merged and the unsharded run"
say "passed: the 2-shard SLURM array merged equals the unsharded run, $whole_rows rows; wall time $(($(date +%s) - started))s"
