#!/usr/bin/env bash
# The campaign's queue on a 2-core CPU: two lanes, each one single-thread run at a time under nice and pinned to its
# own core (taskset: the benchmark gives a run the threads of the cores it may use), so both cores stay busy. Each queue line is "<profile> <seed> <arm> <data root> [<dataset>]" (the dataset a key of the profile's
# datasets, its first by default); every run writes its own record,
# <records>/<profile>-<dataset>/seed<k>-<arm>/results.json, and a run whose record exists is skipped, an interrupted
# one resumes from its last epoch checkpoint: rerun to resume. Lines appended to the queue while it runs are taken
# in turn.
#   bash study/run_queue.sh <queue file> <records folder>
set -uo pipefail
queue=$1 records=$2
next_job() { flock 9; head -n 1 "$queue"; sed -i 1d "$queue"; } 9> "$queue.lock"
lane() {
  local profile seed arm root dataset
  while read -r profile seed arm root dataset <<< "$(next_job)" && [ -n "${profile:-}" ]; do
    [ -n "${dataset:-}" ] || dataset=$(python -c "from study.profiles import PROFILES
print(next(iter(PROFILES['$profile'].datasets)))")
    [ -f "$records/$profile-$dataset/seed$seed-$arm/results.json" ] && continue
    echo "$(date +%T) lane $1: $profile seed $seed $arm"
    taskset -c "$2" nice -n 19 python study/benchmark_small_data.py --profile "$profile" --dataset "$dataset" --data-root "$root" --jobs 1 \
      --runs-dir "runs/queue/$profile-$dataset/seed$seed" --out-dir "$records/$profile-$dataset/seed$seed-$arm" \
      --seeds "$seed" --arms "$arm" > "runs/queue/$profile-$seed-$arm.log" 2>&1 \
      && echo "$(date +%T) lane $1: $profile seed $seed $arm done" \
      || echo "$(date +%T) lane $1: $profile seed $seed $arm failed (runs/queue/$profile-$seed-$arm.log)"
  done
}
mkdir -p runs/queue
lane a 0 & lane b 1 & wait
