#!/usr/bin/env bash
# The `cifar10` benchmark profile on a lent GPU machine: the paper's architecture on full CIFAR-10,
# 20 epochs, four runs sharing the GPU. Run from the checkout root with the data and wheels carried along:
#
#   mkdir -p data && cp -r ../shared/data/cifar10 data/ && cp -r ../shared/device-wheels data/
#   device run (carry: data) -> bash study/gpu_cifar10_profile.sh
#
# It starts the benchmark with setsid (so it keeps going between calls while the machine is held) and returns;
# rerun it to see progress: finished runs are kept and a run cut short resumes. Logs and results go to $OUT.
set -euo pipefail
OUT=${OUT:-runs/gpu-out}
mkdir -p "$OUT"
if ! python3 -c "import datasets" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site data/device-wheels/*.whl
fi
export PYTHONPATH=/tmp/site:${PYTHONPATH:-} HF_HUB_OFFLINE=1
python3 -m pip install -q --no-deps -e . >/dev/null
BENCH="python3 study/benchmark_small_data.py --profile cifar10 --data-path ./data/cifar10"
# two seeds of the six arms, then Kaiming and ConViT (7x slower) once, then the 0.1 (svd) defaults if time is left
if ! pgrep -f "profile cifar10" >/dev/null; then
    setsid nohup bash -c "$BENCH --arms default mimetic impulse3 impulse5 v1 v2 --out-dir $OUT/results \
        && $BENCH --arms kaiming convit --seeds 0 --out-dir $OUT/results-one-seed \
        && $BENCH --arms default impulse3-svd --out-dir $OUT/results-svd" >> "$OUT/benchmark.log" 2>&1 &
fi
sleep 5
tail -n 20 "$OUT/benchmark.log"
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv || true
