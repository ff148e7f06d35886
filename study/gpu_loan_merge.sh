#!/usr/bin/env bash
# After a loan that ran step 3 of study/gpu_loan.sh (the paper's recipe on all of CIFAR-10): put its finished runs
# beside the ones committed in study/records/gpu/cifar10-paper-recipe/ and rewrite that record (results.md/json,
# curves.png) over every seed whose three arms are all there, with the tie rule's verdicts. Trains nothing.
#
#   bash study/gpu_loan_merge.sh <files_at>/loan.tgz
#
# A run comes back as its records only (results.json, metrics.jsonl, train.log, attention_entropy.json): its weights
# are larger than a call carries back. A run already in the record is never replaced; one the loan did not finish is
# left out (the next loan reruns it). The drawing of the best run's starting attention reads data/cifar10.
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: bash study/gpu_loan_merge.sh LOAN_TGZ (the loan's loan.tgz)" >&2; exit 2; }
records=study/records/gpu/cifar10-paper-recipe
loan=$(mktemp -d); trap 'rm -rf "$loan"' EXIT
tar xzf "$1" -C "$loan"
runs=$loan/runs/gpu-loan/runs/gpu/paper  # where gpu_loan.sh packs them
[ -d "$runs" ] || { echo "$1 holds no runs of the paper's recipe (no runs/gpu-loan/runs/gpu/paper/)" >&2; exit 2; }
added=0
for run in "$runs"/*-seed*/; do
    name=$(basename "$run")
    if [ ! -f "$run/results.json" ]; then echo "$name: not finished on the loan, left out"
    elif [ -e "$records/$name" ]; then echo "$name: already in $records, kept as it is"
    else cp -r "$run" "$records/$name" && echo "$name: added" && added=$((added + 1)); fi
done
if [ $added -gt 0 ] && [ -f "$runs/wall_clock.json" ]; then  # the record's wall clock: the loans' together
    python3 - "$records/wall_clock.json" "$runs/wall_clock.json" <<'EOF'
import json, sys
total = sum(json.load(open(path))["wall_clock_s"] for path in sys.argv[1:])
json.dump({"wall_clock_s": round(total, 1)}, open(sys.argv[1], "w"))
EOF
elif [ $added -gt 0 ]; then
    echo "the loan kept no wall clock (stopped before its runs ended): the record's wall clock leaves it out"
fi
complete=$(python3 - "$records" <<'EOF'
import pathlib, sys
finished = {run.parent.name for run in pathlib.Path(sys.argv[1]).glob("*-seed*/results.json")}
seeds = sorted({int(name.rsplit("-seed", 1)[1]) for name in finished})
print(*[s for s in seeds if all(f"{arm}-seed{s}" in finished for arm in ("default", "mimetic", "impulse3"))])
EOF
)
echo "seeds with all three arms: $complete"
[ -e data/cifar10 ] || { mkdir -p data && ln -s "$(cd ../shared/data/cifar10 && pwd)" data/cifar10; }
epochs=$(python3 -c "import json; print(json.load(open('$records/default-seed0/results.json'))['args']['epochs'])")
python3 study/benchmark_small_data.py --profile cifar10-paper-recipe --data-path data/cifar10 --epochs "$epochs" \
    --arms default mimetic impulse3 --seeds $complete --runs-dir "$records" --out-dir "$records" --report-only
