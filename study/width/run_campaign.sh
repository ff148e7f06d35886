#!/usr/bin/env bash
# The campaign's width axis on the 2-core CPU (head dimension 16 -> 32 -> 64): the cpu-proxy at 2,500 images, widths 96
# and 192, width 192's learning rate (1e-3 and the width's 3e-4) and warm-up (1 and 5 epochs), and 5,000 images and 50
# epochs at width 192; crop + flip, 3 heads. study/gpu_width_campaign.sh runs the same queue on a lent GPU.
#
# Two lanes side by side, each one single-thread run at a time under nice, so both cores stay busy. Every run writes
# its own record, <profile>-cifar10/seed<k>-<arm>/results.json; a run whose record is committed (here, or under
# study/records/width/gpu/ from a GPU) is skipped, an interrupted one resumes from its last epoch checkpoint. Rerun to
# resume. The campaign report merges a setting's records seed by seed.
#   bash study/width/run_campaign.sh ../shared/data
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${1:-../shared/data}
queue=runs/width_queue
mkdir -p runs && : > $queue
add() { local profile=$1 arm seed; shift; for seed in 0 1 2; do for arm in "$@"; do echo "$profile $seed $arm" >> $queue; done; done; }
# In priority order: what the width issue asks for first, the optional settings last.
add cpu-proxy-n2500-w96 default mimetic impulse3 v1 v2      # head dim 32
add cpu-proxy-n2500-w96-lr3e-4 default mimetic impulse3 v2 v1  # head dim 32 at its rate (proxy_lr)
add cpu-proxy-n5000-w192-lr3e-4 default mimetic impulse3    # 5,000 images at width 192, at its rate
long() { local arm; for arm in "$@"; do echo "cpu-proxy-n2500-long-w192-lr3e-4 0 $arm" >> $queue; done; }  # 50 epochs
long default mimetic impulse3
add cpu-proxy-n5000-w192 default                             # 5,000 images: timm's default at its better rate
long v1
add cpu-proxy-n2500-w192-warmup5 impulse3 mimetic default   # the warm-up length at the shared rate
add cpu-proxy-n2500-w192-lr3e-4 v2
add cpu-proxy-n2500-w192-warmup5 v1
next_job() { flock 9; head -n 1 $queue; sed -i 1d $queue; } 9> $queue.lock
lane() {
  local profile seed arm record
  while read -r profile seed arm <<< "$(next_job)" && [ -n "${profile:-}" ]; do
    record="$profile-cifar10/seed$seed-$arm/results.json"
    [ -f "study/records/small_data/$record" ] || [ -f "study/records/width/gpu/$record" ] && continue
    echo "$(date +%T) lane $1: $profile seed $seed $arm"
    nice -n 19 python study/benchmark_small_data.py --profile "$profile" --data-root "$root" --jobs 1 \
      --runs-dir "runs/small_data-$profile-cifar10/seed$seed" \
      --out-dir "study/records/small_data/$profile-cifar10/seed$seed-$arm" --seeds "$seed" --arms "$arm" \
      || echo "$(date +%T) lane $1: $profile seed $seed $arm failed"
  done
}
lane a > runs/width_lane_a.log 2>&1 &
lane b > runs/width_lane_b.log 2>&1 &
wait
