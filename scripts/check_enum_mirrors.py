#!/usr/bin/env python3
"""Checks that the bindings take every enum value from the C headers, so
no value is written by hand twice and a new one cannot be forgotten:

- Go names every value of every C enum (`typedef enum` in
  include/fulmen/*.h) through cgo as `C.FULMEN_...` in a non-test file;
- every C++ `enum class` spells each enumerator as a `FULMEN_...` constant
  (never a number), and one that mirrors a C enum names all its values.

A value deliberately left out is listed in bindings/c-only.txt with its
reason, as functions are. Exits 1 listing what is missing.
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def read(paths):
    return {p: open(p, encoding="utf-8").read() for p in paths}


def c_enums():
    """{enum name: [constant, ...]} from the C headers."""
    enums = {}
    for text in read(sorted(glob.glob(os.path.join(ROOT, "include/fulmen/*.h")))).values():
        for name, body in re.findall(r"^typedef enum (\w+) \{(.*?)^\} \w+;", text, re.S | re.M):
            enums[name] = re.findall(r"^\s*(FULMEN_\w+)\s*=", body, re.M)
    return enums


def allowed():
    path = os.path.join(ROOT, "bindings/c-only.txt")
    lines = open(path, encoding="utf-8").read().splitlines() if os.path.exists(path) else []
    return {line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith("#")}


def main():
    enums = c_enums()
    if not enums:
        sys.exit("check_enum_mirrors: no enum found in include/fulmen/*.h")
    owner = {c: name for name, consts in enums.items() for c in consts}
    skip = allowed()
    problems = []

    go = "".join(read(p for p in glob.glob(os.path.join(ROOT, "bindings/go/*.go")) if not p.endswith("_test.go")).values())
    for name, consts in enums.items():
        for c in consts:
            if c not in skip and not re.search(r"\bC\." + c + r"\b", go):
                problems.append(f"not named in Go (as C.{c}): {c} of {name}")

    cpp = read(glob.glob(os.path.join(ROOT, "bindings/cpp/include/fulmen/*.hpp")))
    for path, text in sorted(cpp.items()):
        for cls, body in re.findall(r"enum class (\w+)[^{]*\{(.*?)\};", text, re.S):
            values = re.findall(r"^\s*(\w+)\s*=\s*([^,/\n]+)", body, re.M)
            named = set()
            for enumerator, value in values:
                value = value.strip()
                if not re.fullmatch(r"FULMEN_\w+", value):
                    problems.append(f"{os.path.basename(path)}: {cls}::{enumerator} = {value}, not a FULMEN_ constant")
                else:
                    named.add(value)
            for mirrored in sorted({owner[v] for v in named if v in owner}):
                for c in enums[mirrored]:
                    if c not in named and c not in skip:
                        problems.append(f"{os.path.basename(path)}: {cls} mirrors {mirrored} but lacks {c}")

    for p in problems:
        print(p)
    if problems:
        sys.exit(f"enum mirrors: {len(problems)} gaps (name them, or list them in bindings/c-only.txt with a reason)")
    total = sum(len(c) for c in enums.values())
    print(f"enum mirrors: the bindings take all {total} values of the {len(enums)} C enums from the headers")


if __name__ == "__main__":
    main()
