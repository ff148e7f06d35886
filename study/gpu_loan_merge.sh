#!/usr/bin/env bash
# After a loan that ran step 3 of study/gpu_loan.sh (the paper's recipe on all of CIFAR-10): put its finished runs
# beside the committed ones of the same schedule and rewrite that record (results.md/json, curves.png) over every seed
# whose three arms are all there, with the tie rule's verdicts. Trains nothing. The 10-epoch schedule's record is
# study/records/gpu/cifar10-paper-recipe/; a loan of another length (EPOCHS=12) starts or extends its own,
# study/records/gpu/cifar10-paper-recipe-12ep/, so that no seed meets one of another schedule.
#
#   bash study/gpu_loan_merge.sh <files_at>/loan.tgz
#
# A run comes back as its records only (results.json, metrics.jsonl, train.log, attention_entropy.json): its weights
# are larger than a call carries back. A run already in the record is never replaced, and one the loan did not finish
# is left out (the next loan trains it: gpu_loan.sh's SEEDS and ARMS). The new record is written in a copy first: a
# run trained with other settings than the committed ones stops the merge with the record untouched. The drawing of
# the best run's starting attention reads data/cifar10 (linked to ../shared/data/cifar10 when missing).
set -euo pipefail
shopt -s nullglob
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: bash study/gpu_loan_merge.sh LOAN_TGZ (a loan's loan.tgz)" >&2; exit 2; }
tgz=$(realpath "$1")
cd "$(dirname "$0")/.."
arms=(default mimetic impulse3)
epochs_of() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['args']['epochs'])" "$1"; }
if [ ! -e data/cifar10 ]; then
    [ -d ../shared/data/cifar10 ] || { echo "data/cifar10 is missing (nor is there ../shared/data/cifar10)" >&2; exit 2; }
    mkdir -p data && ln -s "$(realpath ../shared/data/cifar10)" data/cifar10
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar xzf "$tgz" -C "$work"
runs=$work/runs/gpu-loan/runs/gpu/paper  # where gpu_loan.sh packs them
[ -d "$runs" ] || { echo "$1 holds no runs of the paper's recipe (no runs/gpu-loan/runs/gpu/paper/)" >&2; exit 2; }
finished=("$runs"/*-seed*/results.json)
[ ${#finished[@]} -gt 0 ] || { echo "the loan finished no run: nothing to merge"; exit 0; }
records=study/records/gpu/cifar10-paper-recipe
epochs=$(epochs_of "${finished[0]}")
[ "$epochs" = "$(epochs_of "$records/default-seed0/results.json")" ] || records+="-${epochs}ep"
echo "the loan's schedule: $epochs epochs -> $records"

new=()
for run in "$runs"/*-seed*/; do
    name=$(basename "$run")
    if [[ ! "$name" =~ ^[a-z0-9]+-seed[0-9]+$ ]]; then echo "$name: not a run folder, left out"
    elif [ ! -f "$run/results.json" ]; then echo "$name: not finished on the loan, left out"
    elif [ "$(epochs_of "$run/results.json")" != "$epochs" ]; then echo "$name: another schedule than $epochs epochs, left out"
    elif [ -e "$records/$name" ]; then echo "$name: already in $records, kept as it is"
    else new+=("$name"); fi
done
[ ${#new[@]} -gt 0 ] || { echo "the loan adds no finished run: $records unchanged"; exit 0; }
mkdir -p "$records"

report() {  # rewrite the record in folder $1 from its runs of every complete seed
    local seeds
    seeds=$(python3 - "$1" "${arms[@]}" <<'EOF'
import pathlib, sys
folder, arms = pathlib.Path(sys.argv[1]), sys.argv[2:]
names = {path.parent.name for path in folder.glob("*-seed*/results.json")}
seeds = sorted({int(name.rsplit("-seed", 1)[1]) for name in names})
for seed in seeds:
    missing = [arm for arm in arms if f"{arm}-seed{seed}" not in names]
    if missing:
        print(f"seed {seed} lacks {' '.join(missing)}: left out of the table", file=sys.stderr)
print(*[seed for seed in seeds if all(f"{arm}-seed{seed}" in names for arm in arms)])
EOF
)
    python3 study/benchmark_small_data.py --profile cifar10-paper-recipe --data-path data/cifar10 --epochs "$epochs" \
        --arms "${arms[@]}" --seeds $seeds --runs-dir "$1" --out-dir "$1" --report-only
}

cp -r "$records" "$work/record"  # first in a copy: what stops the merge leaves the record as it was
for name in "${new[@]}"; do cp -r "$runs/$name" "$work/record/"; done
report "$work/record" > "$work/check.log" 2>&1 || { cat "$work/check.log" >&2; echo "$records unchanged" >&2; exit 2; }

for name in "${new[@]}"; do cp -r "$runs/$name" "$records/" && echo "$name: added"; done
if [ -f "$runs/wall_clock.json" ]; then  # the record's wall clock: the loans' together
    python3 -c "import json, os, sys
from structinit_hf.atomic import write_json
total = sum(json.load(open(path))['wall_clock_s'] for path in sys.argv[1:] if os.path.exists(path))
write_json(sys.argv[1], {'wall_clock_s': round(total, 1)})" "$records/wall_clock.json" "$runs/wall_clock.json"
else
    echo "the loan kept no wall clock: the record's wall clock leaves it out"
fi
report "$records"
