#!/usr/bin/env bash
# The campaign's width axis (head dimension 16 -> 32 -> 64): cpu-proxy at 2,500 images, widths 96 and 192 (and 192 at
# lr 3e-4, the learning-rate grid), and at 5,000 images, width 192; crop + flip, 10 epochs, 3 heads.
#
# Two lanes side by side, each one single-thread run at a time under nice, so both cores stay busy. Every run writes
# its own record, <profile>-cifar10/seed<k>-<arm>/results.json, so a session that ends mid-way keeps every finished
# run; the campaign report merges a setting's records seed by seed (seed 0 of the five inits at width 192 is one
# 5-arm record, <profile>-cifar10/presets/, from before the lanes). Rerun to resume: finished runs are reused, an
# interrupted one resumes from its last epoch checkpoint.
#   bash benchmarks/width/run_campaign.sh ../shared/data
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${1:-../shared/data}
runs() {  # profile, seed, arms...: one run (and one record) per arm
  local profile=$1 seed=$2 arm; shift 2
  for arm in "$@"; do
    nice -n 19 python scripts/benchmark_small_data.py --profile "$profile" --data-root "$root" --jobs 1 \
      --runs-dir "runs/small_data-$profile-cifar10/seed$seed" \
      --out-dir "benchmarks/small_data/$profile-cifar10/seed$seed-$arm" --seeds "$seed" --arms "$arm"
  done
}
main3=(default mimetic impulse3)
w192=cpu-proxy-n2500-w192
lane_a() {
  runs $w192 1 "${main3[@]}" v1 v2
  runs $w192-lr3e-4 0 "${main3[@]}" v1
  runs $w192-lr3e-4 2 "${main3[@]}" v1
  runs cpu-proxy-n2500-w96 0 "${main3[@]}" v1 v2
  runs cpu-proxy-n2500-w96 2 "${main3[@]}"
  runs cpu-proxy-n5000-w192 0 "${main3[@]}"
  runs cpu-proxy-n5000-w192 2 "${main3[@]}"
}
lane_b() {
  runs $w192 2 "${main3[@]}" v1 v2
  runs $w192-lr3e-4 1 "${main3[@]}" v1
  runs cpu-proxy-n2500-w96 1 "${main3[@]}" v1 v2
  runs cpu-proxy-n5000-w192 1 "${main3[@]}"
}
lane_a > runs/width_lane_a.log 2>&1 &
lane_b > runs/width_lane_b.log 2>&1 &
wait
