#!/usr/bin/env bash
# Time `structinit-hf compare` with its defaults (the CPU proxy at 2,500 images of the embedded CIFAR-10 sample) as a
# whole process, and keep what it printed: <out>/{output.md,time.txt} (default out: study/records/compare). Run it on an
# otherwise idle machine, from the repository root: bash study/benchmark_compare.sh [out]
set -euo pipefail
out=${1:-study/records/compare}
mkdir -p "$out"
runs=$(mktemp -d)
/usr/bin/time -f "wall %e s, user %U s, system %S s, peak RSS %M KB" -o "$out/time.txt" \
    env HF_HUB_OFFLINE=1 python -m structinit_hf compare --output-dir "$runs/compare" > "$out/output.md"
cp "$runs/compare/curves.png" "$runs/compare/results.json" "$out/"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB; load average when it ended: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/time.txt"
cat "$out/output.md" "$out/time.txt"
