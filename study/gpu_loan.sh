#!/usr/bin/env bash
# The next loan (issue 69: the paper's recipe at 50 epochs, one seed of the three arms per loan), two commands on the
# warm machine, from the checkout root, the second the same command resuming what the first left:
#
#   SHARING=file_system STEPS=paper SEEDS=0 EPOCHS=50 JOBS=3 BUDGET=590 bash study/gpu_loan.sh
#   SHARING=file_system STEPS=paper SEEDS=0 EPOCHS=50 JOBS=3 BUDGET=590 bash study/gpu_loan.sh   # resumes
#
# (the second with BUDGET lowered to the device time left less a minute where that is under 590: see the plan below)
#
# (the next loans SEEDS=1, then SEEDS=2). Carried along (data/ is ignored; the tree travels with what is carried,
# 64 MiB at most: without the records 5.6 MB, 64.9 MB with the data and the wheels, so a compile cache over about
# 2 MB also needs model_cards/ and structinit_hf/samples/ (3.8 MB, which the loan does not read) left out as the
# records are):
#
#   mkdir -p data && cp -r ../shared/data/cifar10 ../shared/device-wheels data/
#   mkdir -p data/compile-cache && cp study/records/gpu/compile-cache/*.bin data/compile-cache/ 2>/dev/null
#   git rm -r -q --cached study/records zoo && printf "%s\n" study/records/ zoo/ >> .git/info/exclude  # stay here
#   device run (carry: data/cifar10 data/device-wheels data/compile-cache) -> the command above, twice
#   git reset -q HEAD study/records zoo && sed -i '/^\(study\/records\|zoo\)\/$/d' .git/info/exclude    # tracked again
#
# What comes back: $OUT/loan.tgz (loan.log, progress.log, each run's record, metrics and train.log) and, where the
# runs compiled with no cache for this card and torch, that cache, $OUT/torch-<version>-<card>.bin (under 16 MiB):
# commit it to study/records/gpu/compile-cache/ so that the next loan on that card starts compiled. Then
#   bash study/gpu_loan_merge.sh <files_at>/loan.tgz
# puts the finished runs in study/records/gpu/cifar10-paper-recipe-50ep/ and rewrites that record over them.
#
# The plan, and why 50 epochs fit: on the H100 a run spent about 205 s outside its epochs and 115 s in epoch 1 against
# 12.4 s for each later epoch with three runs sharing the card. Most of the 205 s was the runs' loader workers: each run
# is a process multiprocessing's spawn started, so every worker of its decoding, training, validation and test loaders
# was spawned too, a fresh interpreter importing torch, timm and datasets (28 a run); they are now forked. Validation
# and the test compiled a second graph through the compiled model; they now run the eager one. Both measured on the
# CPU (study/records/training/setup_time.md: a run's process reached its first batch 300-342 s after it started with
# spawned workers, 34-41 s now, on a heavily loaded 2-core machine); on the card each run's train.log, gathered into
# loan.log, says when its first step began after its process started (target: 30 s) and how long that compiled step
# took. At 12.4 s an epoch, 50 epochs are about 620 s of training a run; with set-up, compiling epoch 1 and the test,
# about 700 s. The paper step of a 590-s command has about 530 s (it starts some 36 s in and leaves 25 s for packing),
# so the budget cuts the first command's runs (SIGTERM: each saves a checkpoint at its next step) and the second
# command resumes them: runs/gpu/paper is never cleared here, its runs resume from their newest checkpoint and
# finished ones are kept. A checkpoint with AdamW state is about 65 MB a run, more than a loan can bring back, so each
# seed must finish within its loan. The second command needs about 250 s (some 170 s of epochs left, its own start
# and resumed set-up, packing); a loan of 15 minutes of device time, the machine's start included, leaves it less
# than 590 s, so give it BUDGET = the device time left less a minute, and 590 where more is left. A seed cut short
# (progress.log says where) is rerun whole in a later loan.
#
# The steps (STEPS names those to run; default "check throughput paper"; step 1 always runs):
#   0. check: the Swin and Mixer inits built on the GPU against the CPU's (study/device_init_check.py, about 30 s);
#   1. can DataLoader workers hand tensors over on this machine (an earlier loan's sandbox could not: "received 0
#      items of ancdata")? If only torch's file_system sharing works, it is switched on for this call, and said so
#      (SHARING=file_system skips the default);
#   2. throughput: study/benchmark_training.py, `train` at its GPU defaults (bf16 + compile) and in eager fp32 against
#      a bare loop on the same model and batch (the paper's architecture, batch 512), and the input pipeline alone
#      (PIPELINES=tensor);
#   3. paper: the paper's architecture and recipe on all of CIFAR-10 (profile cifar10-paper-recipe): timm's default,
#      mimetic and `shift` (ARMS narrows them), seeds SEEDS (default 0), JOBS runs sharing the GPU (default 3), for
#      EPOCHS epochs (default: as many whole epochs as the time left allows), BUDGET seconds in all (default 540).
# Earlier loans: study/records/gpu/ (10 epochs, 3 seeds: cifar10-paper-recipe/; the timing call:
# loan-2026-11-28-h100-timing/). SMOKE=1 checks this script on a CPU machine with tiny settings.
set -uo pipefail
start=$(date +%s)
BUDGET=${BUDGET:-540}
STEPS=" ${STEPS:-check throughput paper} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
OUT=${OUT:-runs/gpu-out}
SMOKE=${SMOKE:-0}
DATA=${DATA:-data/cifar10}
keep=runs/gpu-loan  # what is packed at the end
rm -rf "$keep"; mkdir -p "$OUT" "$keep"
left() { echo $((start + BUDGET - $(date +%s))); }
limit() { local s=$(($(left) - $1)); echo $((s > 1 ? s : 1)); }  # a timeout leaving $1 s of the budget (at least 1 s)
log() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$keep/loan.log"; }
pack() { tar czf "$OUT/loan.tgz" "$keep" 2>/dev/null; }
trap pack EXIT

if ! python3 -c "import datasets, timm; assert timm.__version__ >= '1.0.31'" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site data/device-wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -c "import torch, timm, transformers, datasets, accelerate, structinit_hf, os
print('versions: torch', torch.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__,
      'datasets', datasets.__version__, 'accelerate', accelerate.__version__)
print('device:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu', '| cpus:', os.cpu_count())
import resource; print('open files limit (soft, hard):', resource.getrlimit(resource.RLIMIT_NOFILE))
datasets.load_dataset('$DATA')  # builds the cache once
" 2>&1 | tee -a "$keep/loan.log" || exit 1

# 0. The Swin and Mixer inits on the device (issue 45).
check=(--out "$keep/init_check-cuda.md"); [ "$SMOKE" = 1 ] && check=(--device cpu --tiny --out "$keep/init_check-cpu.md")
if step check; then
    log "init check: python study/device_init_check.py ${check[*]}"
    timeout 120 python3 study/device_init_check.py "${check[@]}" > "$keep/init_check.log" 2>&1; log "init check: exit $?"
fi

# 1. Loader workers: the default (file descriptor) sharing, then file_system.
probe() {
    python3 - "$1" <<'EOF' 2>&1 | tail -n 1
import sys, torch
from torch.utils.data import DataLoader
if sys.argv[1] != "default":
    torch.multiprocessing.set_sharing_strategy(sys.argv[1])
data = [torch.rand(3, 32, 32) for _ in range(2048)]
count = sum(batch.shape[0] for batch in DataLoader(data, batch_size=64, num_workers=4))
print("ok" if count == 2048 else f"lost images: {count}")
EOF
}
sharing=none
# SHARING=file_system skips the default (the first loan's probe passed it, yet workers handing over batches of the
# full dataset failed with "received 0 items of ancdata")
for strategy in ${SHARING:-default file_system}; do
    result=$(probe $strategy); log "loader workers, $strategy sharing: $result"
    [ "$result" = ok ] && { sharing=$strategy; break; }
done
if [ "$sharing" = file_system ]; then  # this machine only: every Python of this call shares through files
    mkdir -p /tmp/sharing && echo 'import torch.multiprocessing as m; m.set_sharing_strategy("file_system")' \
        > /tmp/sharing/sitecustomize.py && export PYTHONPATH=/tmp/sharing:$PYTHONPATH
fi
[ "$sharing" = none ] && { log "loader workers cannot pass tensors here: nothing measured"; exit 1; }

# 2. Throughput, side by side in one process (arms interleaved round by round).
throughput=(--data "$DATA" --out "$keep/training" --modes bf16_compiled fp32 --rounds 2 --steps 20 --pipelines ${PIPELINES:-})
[ "$SMOKE" = 1 ] && throughput=(--data "$DATA" --out "$keep/training" --model-kwargs depth=1 --batch-size 8 --steps 2
    --rounds 1 --modes fp32 --threads 1 --workers 1 --pipelines tensor)
if step throughput; then
    log "throughput: python study/benchmark_training.py ${throughput[*]}"
    timeout $(limit 150) python3 study/benchmark_training.py "${throughput[@]}" > "$keep/throughput.log" 2>&1 \
        || log "throughput: stopped (exit $?)"
    grep -E "^round|ratio" "$keep/throughput.log" | tee -a "$keep/loan.log"
fi

# 3. The paper's recipe: as many whole epochs as fit, from the measured rates (the slower of the GPU's bare compiled
# loop and the input pipeline with every core, shared by every run; 70% of it, 150 s for start, compile, scoring and
# packing).
seeds=(${SEEDS:-0})
epochs=${EPOCHS:-$(python3 - "$keep/training/results.json" "$(left)" "${#seeds[@]}" <<'EOF'
import json, sys
try:
    result = next(iter(json.load(open(sys.argv[1]))["devices"].values()))
    bare = max(v for k, v in result["median_images_per_sec"].items() if k.startswith("bare/"))
    rate = min([bare, *result["input_pipeline_images_per_sec"].values()])
except (OSError, KeyError, StopIteration, ValueError):
    rate = 3000
print(max(1, min(60, int((int(sys.argv[2]) - 150) * rate * 0.7 / (3 * int(sys.argv[3])) / 49000))))
EOF
)}
paper=(--profile cifar10-paper-recipe --data-path "$DATA" --epochs "$epochs" --arms ${ARMS:-default mimetic impulse3}
    --seeds "${seeds[@]}" --jobs "${JOBS:-3}" --runs-dir runs/gpu/paper --out-dir "$keep/cifar10-paper-recipe")
[ "$SMOKE" = 1 ] && paper=(--profile cpu-proxy-n2500 --data-root "$(dirname "$DATA")" --arms default --seeds 0 --jobs 1
    --epochs 1 --runs-dir runs/gpu/paper --out-dir "$keep/cifar10-paper-recipe") && epochs=1
if step paper; then
    log "paper recipe, $epochs epochs: python study/benchmark_small_data.py ${paper[*]}"
    # runs/gpu/paper is kept: a second command on the warm machine resumes the runs the first one's budget cut
    export STRUCTINIT_COMPILE_CACHE=$PWD/${COMPILE_CACHE:-data/compile-cache}  # read, or written after epoch 1
    paper_start=$(date +%s); stamp=$(mktemp)  # what the runs write after it is this command's
    # every 10 s, on the loan's clock, each run's epochs written and +done once it has finished (what runs cut by the
    # budget reached; the time before their first epoch is in their train.log, gathered below)
    while sleep 10; do
        echo "[$(($(date +%s) - start)) s]" $(for run in runs/gpu/paper/*-seed*; do [ -d "$run" ] &&
            echo "${run##*/}:$(cat "$run/metrics.jsonl" 2>/dev/null | wc -l)$([ -f "$run/results.json" ] && echo +done)"
        done)
    done > "$keep/progress.log" 2>&1 & sampler=$!
    timeout $(limit 25) python3 study/benchmark_small_data.py "${paper[@]}" > "$keep/paper.log" 2>&1 \
        || log "paper recipe: stopped (exit $?)"
    kill $sampler 2>/dev/null
    clock=runs/gpu/paper/wall_clock.json  # the benchmark keeps it only when it ends on its own
    [ -d runs/gpu/paper ] && [ ! -f $clock ] && echo "{\"wall_clock_s\": $(($(date +%s) - paper_start))}" > $clock
    # each finished run's attention entropy, kept in its folder (the record's table reads it once the weights are
    # gone); the benchmark wrote it already if every run finished
    timeout $(limit 10) python3 -c "import pathlib
from structinit_hf.benchmark.runs import is_finished
from structinit_hf.benchmark.summary import trained_attention_entropy
for run in sorted(pathlib.Path('runs/gpu/paper').glob('*-seed*')):
    if is_finished(run): trained_attention_entropy(run)" >> "$keep/paper.log" 2>&1 || log "entropy: stopped (exit $?)"
    find runs/gpu/paper \( -name "*.json" -o -name metrics.jsonl -o -name train.log \) \
        -not -path "*/final/*" -not -path "*/checkpoints/*" -exec cp --parents {} "$keep" \; 2>/dev/null
    # where each run's time before its first epoch went: its process start, its set-up, when its first step began
    # (seconds after its process started: the set-up target) and how long that compiled step took
    grep -aHoE "process start: [0-9.]+ s|set-up: [0-9.]+ s|first step: began [0-9.]+ s after the process started|\
torch.compile: the first step took [0-9.]+ s|warning: torch.compile failed.*" runs/gpu/paper/*-seed*/train.log \
        2>/dev/null | tee -a "$keep/loan.log"
    tail -n 8 "$keep/paper.log" | tee -a "$keep/loan.log"
    grep -ahoE "compile cache: (loaded|saved) .*" runs/gpu/paper/*-seed*/train.log 2>/dev/null | sort | uniq -c \
        | tee -a "$keep/loan.log"
    # a cache this command's runs made comes back beside loan.tgz (files are capped at 16 MiB)
    find "$STRUCTINIT_COMPILE_CACHE" -name "*.bin" -newer "$stamp" -size -16M 2>/dev/null |
        while read -r cache; do cp "$cache" "$OUT/" && log "compile cache: $(basename "$cache") brought back"; done
fi
nvidia-smi --query-gpu=name,memory.used --format=csv 2>/dev/null | tee -a "$keep/loan.log"
log "done"
