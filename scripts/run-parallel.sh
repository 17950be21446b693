#!/usr/bin/env bash
# Runs shell commands, one per line on stdin, at most JOBS at a time, in
# the order given (so list the longest first). Each command's output
# (stdout and stderr) is kept together and printed, under "== COMMAND",
# when the command ends. After every command has ended, exits 1 naming
# those that failed, else 0.
#
#   scripts/run-parallel.sh JOBS < commands
#
# The commands run with this script's environment and working folder,
# each in `bash -c`; their outputs go to a temporary folder removed at
# the end. A signal to this script ends the commands still running.
# Every RUN_PARALLEL_HEARTBEAT seconds (300 by default, 0 for never) it
# names the commands still running and their last output line, so a
# command that hangs shows where before any limit ends the run.
set -u
jobs=${1:?usage: run-parallel.sh JOBS < commands}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run-parallel.sh: JOBS must be a positive number, not '$jobs'" >&2; exit 2; }

command -v flock > /dev/null || { echo "run-parallel.sh: needs flock (util-linux)" >&2; exit 2; }
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
    echo "run-parallel.sh: needs bash 5.1 or newer (wait -p), this is $BASH_VERSION" >&2
    exit 2
fi

heartbeat=${RUN_PARALLEL_HEARTBEAT:-300}
[[ "$heartbeat" =~ ^[0-9]+$ ]] || { echo "run-parallel.sh: RUN_PARALLEL_HEARTBEAT must be seconds, not '$heartbeat'" >&2; exit 2; }

logs=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-parallel.XXXXXX")
heartbeat_pid=
# The heartbeat leads its own process group (set -m below): its sleep ends
# with it, holding no output pipe open after this script.
stop_heartbeat() {
    [[ -n "$heartbeat_pid" ]] && kill -- "-$heartbeat_pid" 2>/dev/null
    heartbeat_pid=
}
trap 'stop_heartbeat; rm -rf "$logs"' EXIT
declare -A command_of=() start_of=() log_of=()
failed=()
count=0
# Each command in its own process group, so that stopping it stops all it
# started (a pipeline's programs, a test's child processes).
set -m

stop_all() {
    stop_heartbeat
    for pid in "${!command_of[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
    wait
    exit 130
}
trap stop_all INT TERM HUP

# Prints, under the output lock, what the heartbeat sees running: each
# command with a log N.log, its text in N.cmd and start in N.start, and
# no N.done yet.
report_running() {
    local now f base started last
    while sleep "$heartbeat"; do
        now=$(date +%s)
        (
            flock 9
            for f in "$logs"/*.cmd; do
                base=${f%.cmd}
                [[ -e "$f" && ! -e "$base.done" ]] || continue
                started=$(< "$base.start")
                echo "== still running after $((now - started)) s: $(< "$f")"
                last=$(tail -n 1 "$base.log" 2>/dev/null)
                [[ -n "$last" ]] && echo "   its last line: ${last:0:200}"
            done
        ) 9> "$logs/output.lock"
    done
}

# Waits for one running command, prints its output, records a failure.
reap_one() {
    local pid status
    wait -n -p pid
    status=$?
    if [[ -z "${pid:-}" ]]; then
        echo "run-parallel.sh: waited for ${#command_of[@]} running commands and found none" >&2
        exit 2
    fi
    (
        flock 9
        touch "${log_of[$pid]%.log}.done"
        echo "== ${command_of[$pid]}"
        cat "${log_of[$pid]}"
        if [[ $status != 0 ]]; then
            echo "== FAILED (exit $status) after $(($(date +%s) - start_of[$pid])) s: ${command_of[$pid]}"
        fi
    ) 9> "$logs/output.lock"
    [[ $status != 0 ]] && failed+=("${command_of[$pid]}")
    unset "command_of[$pid]" "start_of[$pid]" "log_of[$pid]"
}

if ((heartbeat > 0)); then
    report_running < /dev/null &
    heartbeat_pid=$!
    disown "$heartbeat_pid" # not one of the commands wait reaps
fi

while IFS= read -r line; do
    [[ -z "${line// /}" ]] && continue
    while ((${#command_of[@]} >= jobs)); do reap_one; done
    count=$((count + 1))
    log="$logs/$count.log"
    date +%s > "$logs/$count.start"
    printf '%s' "$line" > "$logs/$count.cmd"
    bash -c "$line" > "$log" 2>&1 < /dev/null &
    command_of[$!]=$line
    start_of[$!]=$(date +%s)
    log_of[$!]=$log
done
while ((${#command_of[@]} > 0)); do reap_one; done

if ((${#failed[@]} > 0)); then
    echo "${#failed[@]} of $count failed:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
