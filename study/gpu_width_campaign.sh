#!/usr/bin/env bash
# The width campaign on a lent GPU machine, in one call sized to the device time at hand (BUDGET seconds, default
# 540): first the paper-scale check (the paper's architecture on all of CIFAR-10, timm's default, mimetic and
# impulse 3x3, three runs sharing the GPU, as many epochs as fit), and beside it the cpu-proxy width settings, one
# single-arm record per (profile, seed, arm), taken from a queue in priority order by five lanes of two cores each.
# The proxy profiles fix fp32 and eager, so a run here is the CPU's run on another device. Run from the checkout root
# with the data and the wheels the machine lacks carried along:
#
#   mkdir -p data && cp -r ../shared/data/cifar10 ../shared/device-wheels data/   # data/ is ignored
#   device run (carry: data) -> bash study/gpu_width_campaign.sh
#
# What finished comes back in $OUT/gpu_records.tgz (records under study/records/width/gpu/, each run's metrics and log);
# a run still training at the deadline is lost, the queue's order says which ones go first.
set -uo pipefail
start=$(date +%s)
BUDGET=${BUDGET:-540}
OUT=${OUT:-runs/gpu-out}
SMOKE=${SMOKE:-0}  # 1: a check of this script on a CPU machine (no taskset, a tiny queue)
mkdir -p "$OUT" runs/gpu
left() { echo $((start + BUDGET - $(date +%s))); }
log() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$OUT/campaign.log"; }

if ! python3 -c "import datasets, timm; assert timm.__version__ >= '1.0.31'" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site data/device-wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -c "import torch, timm, transformers, datasets, accelerate, structinit_hf
print('versions: torch', torch.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__,
      'datasets', datasets.__version__, 'accelerate', accelerate.__version__)
print('device:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu', '| cpus:', __import__('os').cpu_count())
datasets.load_dataset('data/cifar10')  # builds the cache once, before the lanes race for it
" 2>&1 | tee -a "$OUT/campaign.log" || exit 1
cores=$(nproc)
pin() {  # pin <first core> <count> cmd...: taskset where the machine has the cores (a CPU smoke test has not)
    local first=$1 count=$2; shift 2
    if [ "$SMOKE" = 1 ] || [ $((first + count)) -gt "$cores" ]; then "$@"; else taskset -c "$first-$((first + count - 1))" "$@"; fi
}
bench=(python3 study/benchmark_small_data.py --data-root data)  # taskset runs programs, not shell functions

# 1. The paper-scale check: the epoch count from a measured step rate, three runs sharing the GPU.
paper_cores=6
rate=$(pin 0 $paper_cores python3 - <<'EOF'
import time, timm, torch, structinit_hf
from structinit_hf.benchmark.arms import ALL_ARMS
from structinit_hf.benchmark.profiles import PROFILES, arm_model_kwargs
arm, profile = ALL_ARMS["default"], PROFILES["cifar10-proxy-recipe"]
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model(arm.model, num_classes=10, **arm_model_kwargs(arm, profile)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
batch = 256 if device == "cuda" else 8
x, y = torch.randn(batch, 3, 32, 32, device=device), torch.randint(0, 10, (batch,), device=device)
def steps(n):
    for _ in range(n):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
    if device == "cuda": torch.cuda.synchronize()
steps(5)
t = time.perf_counter(); n = 30 if device == "cuda" else 2; steps(n)
print(round(batch * n / (time.perf_counter() - t)))
EOF
)
[ -n "$rate" ] || { log "calibration failed"; exit 1; }
# three runs share the GPU (and the lanes take a little): each gets about a third, less 15%; 90 s for start and scoring
epochs=$(python3 -c "print(max(1, min(60, int(($(left) - 90) * $rate * 0.85 / 3 / 49000))))")
[ "$SMOKE" = 1 ] && epochs=1
log "one model alone: $rate img/s (bf16, eager, batch 256); paper-scale check: $epochs epochs"
paper_args=(--profile cifar10-proxy-recipe --epochs "$epochs" --arms default mimetic impulse3 --seeds 0 --jobs 3
    --runs-dir runs/gpu/cifar10-proxy-recipe --out-dir study/records/width/gpu/cifar10-proxy-recipe-cifar10)
[ "$SMOKE" = 1 ] && paper_args=(--profile cpu-proxy-n2500 --arms default --seeds 0 --jobs 1 --epochs 1
    --runs-dir runs/gpu/smoke-paper --out-dir study/records/width/gpu/smoke-paper)
pin 0 $paper_cores "${bench[@]}" "${paper_args[@]}" > "$OUT/paper.log" 2>&1 &
paper=$!

# 2. The proxy queue, in priority order: "profile seed arm" per line.
queue=runs/gpu/queue
: > $queue
add() { local profile=$1 arm seed; shift; for seed in 0 1 2; do for arm in "$@"; do echo "$profile $seed $arm" >> $queue; done; done; }
if [ "$SMOKE" = 1 ]; then
    echo "cpu-proxy-n2500-w96 0 default" > $queue; echo "cpu-proxy-n2500-w96 0 v2" >> $queue
else
    add cpu-proxy-n5000-w192-lr3e-4 default mimetic impulse3          # 5,000 images at width 192, at its rate
    add cpu-proxy-n5000-w192 default                                  # ... and timm's default at its better rate
    for arm in default mimetic impulse3 v1; do echo "cpu-proxy-n2500-long-w192-lr3e-4 0 $arm" >> $queue; done  # 50 ep.
    add cpu-proxy-n2500-w192-lr3e-4 default mimetic impulse3 v1 v2      # the learning-rate grid, at 3e-4 ...
    add cpu-proxy-n2500-w192 default mimetic impulse3 v1 v2             # ... and at 1e-3 on this device
    add cpu-proxy-n2500-w192-warmup5 impulse3 mimetic default v1        # the warm-up length
    add cpu-proxy-n2500-w96 default mimetic impulse3 v1 v2              # the width axis: head dim 32 ...
    add cpu-proxy-n2500-w96-lr3e-4 default mimetic impulse3 v1 v2       # ... and at its rate (proxy_lr)
    add cpu-proxy-n2500 default mimetic impulse3 v1 v2                  # ... and head dim 16, on this device
fi
log "queue: $(wc -l < $queue) runs"
next_job() { flock 9; head -n 1 $queue; sed -i 1d $queue; } 9> $queue.lock
lane() {  # lane <first core>: runs from the queue until it is empty or too little time is left
    local first=$1 profile seed arm
    while [ "$(left)" -gt 45 ]; do
        read -r profile seed arm <<< "$(next_job)"
        [ -n "${profile:-}" ] || break
        record="$profile-cifar10/seed$seed-$arm/results.json"  # committed already (here or from the CPU): skip it
        [ -f "study/records/width/gpu/$record" ] || [ -f "study/records/small_data/$record" ] && continue
        log "lane $first: $profile seed $seed $arm"
        pin "$first" 2 "${bench[@]}" --profile "$profile" --seeds "$seed" --arms "$arm" --jobs 1 \
            --runs-dir "runs/gpu/$profile/seed$seed" --out-dir "study/records/width/gpu/$profile-cifar10/seed$seed-$arm" \
            "${smoke_epochs[@]}" >> "$OUT/lane$first.log" 2>&1 || log "lane $first: $profile seed $seed $arm failed"
    done
}
lanes=()
smoke_epochs=(); [ "$SMOKE" = 1 ] && smoke_epochs=(--epochs 1)
LANES=${LANES:-5}  # 0: the paper-scale check alone
for first in 6 8 10 12 14; do
    [ ${#lanes[@]} -lt "$LANES" ] || break
    lane $first & lanes+=($!); [ "$SMOKE" = 1 ] && break
done

# 3. Wait for the work or the deadline, then pack what finished.
while [ "$(left)" -gt 25 ]; do
    running=0
    for pid in "$paper" ${lanes[@]+"${lanes[@]}"}; do kill -0 "$pid" 2>/dev/null && running=1; done
    [ $running = 0 ] && break
    sleep 5
done
log "packing; queue left: $(wc -l < $queue) run(s)"
pkill -f -- "runs/gpu/"; sleep 2  # this campaign's runs only: their arguments name runs/gpu/
find runs/gpu -name metrics.jsonl -o -name train.log -o -name benchmark_run.json -o -name run_timing.json \
    | tar czf "$OUT/gpu_records.tgz" study/records/width/gpu -T - 2>> "$OUT/campaign.log"
nvidia-smi --query-gpu=name,memory.used --format=csv 2>/dev/null | tee -a "$OUT/campaign.log"
log "done: $(find study/records/width/gpu -name results.json | wc -l) records"
