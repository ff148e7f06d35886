#!/usr/bin/env bash
# The campaign's width axis (head dimension 16 -> 32 -> 64): cpu-proxy at 2,500 images, widths 96 and 192 (and 192 at
# lr 3e-4, the learning-rate grid), and at 5,000 images, width 192; crop + flip, 10 epochs, 3 heads.
#
# Two lanes side by side, each one single-thread run at a time under nice, so both cores stay busy. Every step is one
# seed of one setting and writes its own record, <profile>-cifar10/seed<k>/results.json (the five inits with the
# authors' presets: presets-seed<k>/), so a session that ends mid-way keeps every finished step; the campaign report
# merges a setting's records seed by seed. Rerun to resume: finished runs are reused, an interrupted one resumes from
# its last epoch checkpoint.
#   bash benchmarks/width/run_campaign.sh ../shared/data
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${1:-../shared/data}
step() {  # profile, record folder under <profile>-cifar10/, seed, arms...
  local profile=$1 sub=$2 seed=$3; shift 3
  nice -n 19 python scripts/benchmark_small_data.py --profile "$profile" --data-root "$root" --jobs 1 \
    --runs-dir "runs/small_data-$profile-cifar10/seed$seed" --out-dir "benchmarks/small_data/$profile-cifar10/$sub" \
    --seeds "$seed" --arms "$@"
}
main3=(default mimetic impulse3)
w192=cpu-proxy-n2500-w192
# seed 0 of the five inits at width 192 is committed in $w192-cifar10/presets/ (one 5-arm run before the lanes)
lane_a() {
  step $w192 seed1 1 "${main3[@]}"
  step $w192 presets-seed1 1 v1 v2
  step $w192-lr3e-4 seed0 0 "${main3[@]}" v1
  step $w192-lr3e-4 seed2 2 "${main3[@]}" v1
  step cpu-proxy-n2500-w96 presets-seed0 0 "${main3[@]}" v1 v2
  step cpu-proxy-n2500-w96 seed2 2 "${main3[@]}"
  step cpu-proxy-n5000-w192 seed0 0 "${main3[@]}"
  step cpu-proxy-n5000-w192 seed2 2 "${main3[@]}"
}
lane_b() {
  step $w192 seed2 2 "${main3[@]}"
  step $w192 presets-seed2 2 v1 v2
  step $w192-lr3e-4 seed1 1 "${main3[@]}" v1
  step cpu-proxy-n2500-w96 presets-seed1 1 "${main3[@]}" v1 v2
  step cpu-proxy-n5000-w192 seed1 1 "${main3[@]}"
}
lane_a > runs/width_lane_a.log 2>&1 &
lane_b > runs/width_lane_b.log 2>&1 &
wait
