#!/usr/bin/env bash
# Issue 72 point 5, on what a zoo loan leaves of its device time: where a zoo run's 21 s between its process start and
# its set-up go (the imports), and what the paper's model (batch 512, bf16) gains in the bare loop from CUDA graphs
# and from autotuned kernels, side by side with the compile train.py uses, one process, one round. The command
# (carry: data/device-wheels; the tree as study/zoo_loan.sh's header says):
#
#   BUDGET=265 bash study/gpu_speed_probe.sh
#
# Comes back: $OUT/probe.tgz (loan.log, importtime-first.log, importtime-second.log, speed.log, training/results.json). SMOKE=1: the CPU, a 1-block model.
set -uo pipefail
start=$(date +%s)
BUDGET=${BUDGET:-265}
OUT=${OUT:-runs/probe-out}
keep=runs/probe
rm -rf "$keep"; mkdir -p "$OUT" "$keep"
left() { echo $((start + BUDGET - $(date +%s))); }
limit() { local s=$(($(left) - $1)); echo $((s > 1 ? s : 1)); }  # a timeout leaving $1 s of the budget (at least 1 s)
log() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$keep/loan.log"; }
trap 'tar czf "$OUT/probe.tgz" -C runs probe' EXIT

source study/loan_env.sh || exit 1
for attempt in first second; do  # the first meets a cold disk as a run's process does; the second, warm files
    begun=$(date +%s.%N)
    python3 -X importtime -c "import structinit_hf.train.training.loop, structinit_hf.train.data.tensor_data" \
        2> "$keep/importtime-$attempt.log"
    log "imports ($attempt): $(python3 -c "print(round($(date +%s.%N) - $begun, 1))") s"
done
sort -t'|' -k2 -n -r "$keep/importtime-first.log" | head -n 12 | tee -a "$keep/loan.log"

modes=(bf16_compiled bf16_cudagraphs bf16_autotuned)
speed=(--data "${DATA:-data/cifar10}" --out "$keep/training" --modes "${modes[@]}" --bare-only --rounds 1 --steps 40
    --pipelines)
[ "${SMOKE:-0}" = 1 ] && speed=(--data x --out "$keep/training" --modes fp32 --bare-only --rounds 1 --steps 2
    --batch-size 8 --model-kwargs depth=1 --threads 1 --pipelines)
log "speed: python study/benchmark_training.py ${speed[*]}"
timeout -k 5 "$(limit 10)" python3 study/benchmark_training.py "${speed[@]}" > "$keep/speed.log" 2>&1
log "speed: exit $?"
grep -E "^round" "$keep/speed.log" | tee -a "$keep/loan.log"
log "done"
