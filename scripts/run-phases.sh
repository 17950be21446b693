#!/usr/bin/env bash
# Runs `make test`'s phases one after another (MAKE PHASE...), stopping at
# the first that fails, and prints how long each took, so that a slow
# suite shows where its time goes.
set -u
make_cmd=$1
shift
summary=()
suite_start=$(date +%s)
for phase in "$@"; do
    start=$(date +%s)
    if ! $make_cmd --no-print-directory "$phase"; then
        echo "== phase $phase failed after $(($(date +%s) - start)) s"
        exit 1
    fi
    took=$(($(date +%s) - start))
    echo "== phase $phase took $took s"
    summary+=("$(printf '%6d s  %s' "$took" "$phase")")
done
echo "== time per phase (all: $(($(date +%s) - suite_start)) s)"
printf '%s\n' "${summary[@]}"
