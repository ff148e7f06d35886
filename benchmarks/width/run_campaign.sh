#!/usr/bin/env bash
# The campaign's width axis (head dimension 16 -> 32 -> 64): cpu-proxy at 2,500 images, widths 96 and 192, and at
# 5,000 images, width 192; crop + flip, 10 epochs, 3 heads. Two single-thread runs at a time under nice; rerun to
# resume (finished runs are reused, an interrupted one resumes from its last epoch checkpoint). Each step rewrites
# its profile's results.json, so the record grows seed by seed.
#   bash benchmarks/width/run_campaign.sh ../shared/data
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${1:-../shared/data}
bench() {  # profile, out-dir under its folder ("" or presets), then --arms/--seeds
  local profile=$1 sub=$2; shift 2
  nice -n 19 python scripts/benchmark_small_data.py --profile "$profile" --data-root "$root" --jobs 2 \
    --out-dir "benchmarks/small_data/$profile-cifar10/$sub" "$@"
}
main3=(default mimetic impulse3)
all5=(default mimetic impulse3 v1 v2)
# the five inits with the authors' presets (v1, v2) at 1 then 2 seeds go to <profile>-cifar10/presets/; timm's
# default, mimetic and shift at 3 seeds to <profile>-cifar10/
bench cpu-proxy-n2500-w192 presets --arms "${all5[@]}" --seeds 0
bench cpu-proxy-n2500-w96 presets --arms "${all5[@]}" --seeds 0
bench cpu-proxy-n2500-w192 presets --arms "${all5[@]}" --seeds 0 1
bench cpu-proxy-n2500-w96 presets --arms "${all5[@]}" --seeds 0 1
bench cpu-proxy-n2500-w192 "" --arms "${main3[@]}" --seeds 0 1 2
bench cpu-proxy-n2500-w96 "" --arms "${main3[@]}" --seeds 0 1 2
bench cpu-proxy-n5000-w192 "" --arms "${main3[@]}" --seeds 0 1 2
