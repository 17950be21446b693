#!/usr/bin/env bash
# Fails when a source names a temporary path that another test could also
# use: the tests of one process run in parallel threads, and other test
# processes (of this clone or another) may run at the same time, so every
# temporary file lives in a folder made new for it. Refused:
#   Rust    std::env::temp_dir() outside src/test_dirs.rs (tests take a
#           crate::test_dirs::TempDir), and "/tmp literals;
#   C, C++  a "/tmp/..." literal that is not a mkdtemp / mkstemp template
#           (ending in XXXXXX), and temp_directory_path() without one;
#   Go      os.TempDir(), ioutil.TempDir and "/tmp literals (t.TempDir());
#   Python  tempfile.gettempdir() and '/tmp/ literals (tempfile.mkdtemp,
#           TemporaryDirectory);
#   shell   /tmp on a line without mktemp (scripts, the Makefile).
# Each offending line is printed. Run by `make lint`; checks its own rules
# on known lines first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each rule reads "path:line:text" lines and prints the offending ones.
rust_rule() { grep -E 'temp_dir\(\)|"/tmp' | grep -v '^src/test_dirs\.rs:' || true; }
c_rule() {
    awk '{
        bad = 0; rest = $0
        while (match(rest, /"\/tmp\/[^"]*"/)) {
            if (substr(rest, RSTART, RLENGTH) !~ /XXXXXX"$/) bad = 1
            rest = substr(rest, RSTART + RLENGTH)
        }
        if ($0 ~ /temp_directory_path/ && $0 !~ /XXXXXX/) bad = 1
        if (bad) print
    }'
}
go_rule() { grep -E '\bos\.TempDir\(|\bioutil\.TempDir\(|"/tmp' || true; }
python_rule() { grep -E "gettempdir\(|[\"']/tmp/" || true; }
shell_rule() { grep -E '/tmp([^A-Za-z0-9_]|$)' | grep -v 'mktemp' || true; }

# The rules on lines they must refuse and lines they must pass.
self_test() {
    local rule=$1 want=$2 line got
    shift 2
    for line in "$@"; do
        got=$(printf '%s\n' "$line" | "$rule")
        if { [ "$want" = refuse ] && [ -z "$got" ]; } || { [ "$want" = pass ] && [ -n "$got" ]; }; then
            echo "check-temp-paths: $rule should $want: $line" >&2
            exit 2
        fi
    done
}
self_test rust_rule refuse 'src/a/tests.rs:1:    let p = std::env::temp_dir().join("x.pt");' \
    'src/a.rs:2:    m.save(Path::new("/tmp/x.pt"));'
self_test rust_rule pass 'src/test_dirs.rs:9:        let dir = std::env::temp_dir().join(name);' \
    'src/a.rs:3:    let dir = TempDir::new("a");'
self_test c_rule refuse 'tests/c/t.c:1:    snprintf(p, n, "/tmp/fulmen-x-%d", (int)getpid());' \
    'tests/c/t.c:2:    save(m, "/tmp/never.pt");' \
    'tests/c/t.c:3:    char a[] = "/tmp/a-XXXXXX", b[] = "/tmp/b.ckpt";' \
    'x.hpp:4:    auto p = std::filesystem::temp_directory_path() / "fixed";'
self_test c_rule pass 'tests/c/t.c:5:    char d[] = "/tmp/fulmen-x-XXXXXX";' \
    'tests/gpu/g.c:6:    snprintf(w, n, "%s/g.XXXXXX", argc > 1 ? argv[1] : "/tmp");' \
    'x.hpp:7:    auto p = (std::filesystem::temp_directory_path() / "x-XXXXXX").string();'
self_test go_rule refuse 'bindings/go/a_test.go:1:	dir := os.TempDir()' \
    'bindings/go/a_test.go:2:	path := "/tmp/x.csv"'
self_test go_rule pass 'bindings/go/a_test.go:3:	path := filepath.Join(t.TempDir(), "x.csv")'
self_test python_rule refuse 'tests/interop/a.py:1:d = os.path.join(tempfile.gettempdir(), "x")' \
    "tests/interop/a.py:2:open('/tmp/x.pt', 'wb')"
self_test python_rule pass 'tests/interop/a.py:3:work = tempfile.mkdtemp(prefix="x-")'
self_test shell_rule refuse 'scripts/a.sh:1:work=/tmp/fulmen-x' 'scripts/a.sh:2:rm -rf "${TMPDIR:-/tmp}/fulmen-x"'
self_test shell_rule pass 'scripts/a.sh:3:work=$(mktemp -d "${TMPDIR:-/tmp}/fulmen-x.XXXXXX")' \
    'scripts/a.sh:4:rm -rf "$tmpdir"'

if ! git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    echo "check-temp-paths: not a git checkout, skipped"
    exit 0
fi

# Lines of tracked and untracked (not ignored) files matching the pathspecs.
candidates() { git grep -n -I --untracked -E 'tmp|temp_dir|TempDir|gettempdir|temp_directory_path' -- "$@" || true; }

found=$(
    candidates '*.rs' | rust_rule
    candidates '*.c' '*.h' '*.cpp' '*.hpp' '*.inc' | c_rule
    candidates '*.go' | go_rule
    candidates '*.py' | python_rule
    candidates '*.sh' 'Makefile' '*.mk' ':(exclude)scripts/check-temp-paths.sh' | shell_rule
)
if [ -n "$found" ]; then
    printf '%s\n' "$found"
    echo "check-temp-paths: temporary paths another test could also use (see scripts/check-temp-paths.sh)" >&2
    exit 1
fi
echo "check-temp-paths: every temporary path in the sources is made unique"
