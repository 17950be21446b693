#!/usr/bin/env bash
# Runs `make test`'s phases one after another (MAKE JOBS PHASE...), stopping at
# the first that fails, and prints how long each took and how busy it
# kept the machine's processors (100% is all of them), so that a slow
# suite shows where its time goes and where it leaves processors idle.
# Each phase's make builds up to JOBS targets at a time.
set -u
make_cmd=${1:?usage: run-phases.sh MAKE JOBS PHASE...}
jobs=${2:-}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run-phases.sh: JOBS must be a positive number, not '$jobs'" >&2; exit 2; }
shift 2

# Busy and total jiffies of all processors so far (the "cpu" line of
# /proc/stat: idle and iowait count as idle); "0 0" where it is missing.
cpu_jiffies() {
    if [[ -r /proc/stat ]]; then
        awk '/^cpu / { total = 0; for (i = 2; i <= NF; i++) total += $i; print total - $5 - $6, total; exit }' /proc/stat
    else
        echo "0 0"
    fi
}

summary=()
suite_start=$(date +%s)
for phase in "$@"; do
    start=$(date +%s)
    read -r busy0 total0 < <(cpu_jiffies)
    if ! $make_cmd --no-print-directory -j"$jobs" "$phase"; then
        echo "== phase $phase failed after $(($(date +%s) - start)) s"
        exit 1
    fi
    took=$(($(date +%s) - start))
    read -r busy1 total1 < <(cpu_jiffies)
    busy="?"
    if ((total1 > total0)); then busy="$(((busy1 - busy0) * 100 / (total1 - total0)))%"; fi
    echo "== phase $phase took $took s (processors $busy busy)"
    summary+=("$(printf '%6d s  %5s  %s' "$took" "$busy" "$phase")")
done
echo "== time per phase (all: $(($(date +%s) - suite_start)) s; $jobs jobs; processors busy)"
printf '%s\n' "${summary[@]}"
