#!/usr/bin/env bash
# Lists every function of the C headers (include/fulmen/*.h) that the C++ or the Go binding
# does not call, and fails unless it is listed in bindings/c-only.txt
# (functions that are intentionally C-only, one per line, # comments).
set -euo pipefail
cd "$(dirname "$0")/.."
allowed=$(grep -v '^\s*#' bindings/c-only.txt 2>/dev/null | awk 'NF {print $1}' || true)
missing=0
for f in $(cat include/fulmen/*.h | grep -oE '\bfulmen_[a-z0-9_]+\s*\(' | tr -d '( ' | sort -u); do
    if grep -qxF "$f" <<<"$allowed"; then
        continue
    fi
    for side in cpp go; do
        case $side in
            cpp) files=(bindings/cpp/include/fulmen/*.hpp bindings/cpp/include/fulmen/*.inc) ;;
            go) files=(bindings/go/*.go bindings/go/*.c bindings/go/*.h) ;;
        esac
        if ! grep -qw "$f" "${files[@]}"; then
            echo "not wrapped in $side: $f"
            missing=$((missing + 1))
        fi
    done
done
if [ "$missing" -gt 0 ]; then
    echo "binding coverage: $missing gaps (wrap them, or list them in bindings/c-only.txt with a reason)"
    exit 1
fi
echo "binding coverage: every C API function is reached by the C++ and Go bindings"
