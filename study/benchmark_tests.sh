#!/usr/bin/env bash
# Time the test suite as a developer and CI meet it: a fresh clone of this checkout's HEAD, the README's test command
# on the fast subset (-m "not slow") N times (the first run compiles and rewrites every module; the later ones read
# what Python cached, unless PYTHONDONTWRITEBYTECODE is set), then once the whole suite (--full). Before each run a
# fixed Python loop is timed: the machine's core speed, which moves by a third between minutes on a shared host, so
# a slow run can be told from a slow moment. Writes <out>/fast_tests.md (default out: study/records/tests).
# Run it on an otherwise idle machine, from the repository root:
#   bash study/benchmark_tests.sh [runs] [out] [--full]
set -euo pipefail
runs=${1:-5} out=${2:-study/records/tests} full=${3:-}
mkdir -p "$out"
clone=$(mktemp -d)/repo
git clone -q . "$clone"
[ -d ../shared ] && ln -s "$(cd .. && pwd)/shared" "$(dirname "$clone")/shared"
probe() { python -c "import time
t = time.perf_counter(); s = 0
for i in range(10_000_000): s += i
print(f'{time.perf_counter() - t:.2f}')"; }
timed() {  # <label> <pytest args...>: one row of the table
  local label=$1 loop start passed; shift
  loop=$(probe)
  start=$(date +%s.%N)
  passed=$(cd "$clone" && env HF_HUB_OFFLINE=1 python -m pytest -q "$@" 2>&1 | tail -n 1)
  printf '| %s | %.1f | %s | %s |\n' "$label" "$(python -c "print($(date +%s.%N) - $start)")" "$loop" "$passed"
}
{
  echo "# Test suite time, fresh clone of $(git rev-parse --short HEAD)"
  echo
  echo "$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB, python $(python -c 'import platform; print(platform.python_version())'),"
  echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}; command: \`HF_HUB_OFFLINE=1 python -m pytest -q\` in the clone."
  echo "The core-speed probe is a fixed 10-million-step Python loop timed just before the run (lower is faster)."
  echo
  echo "| run | wall (s) | probe (s) | pytest's last line |"
  echo "|---|---|---|---|"
  for run in $(seq 1 "$runs"); do
    timed "fast subset, run $run" -m "not slow"
  done
  if [ "$full" = --full ]; then
    timed "whole suite"
  fi
} | tee "$out/fast_tests.md"
