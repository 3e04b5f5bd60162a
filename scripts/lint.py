#!/usr/bin/env python3
"""lint.py: style rules for the C sources (`make lint`; .ci/run runs it before the tests).

Every *.c and *.h under compiler/ and runtime/ (subfolders included):
  - no line longer than 120 columns (characters, UTF-8 decoded; a tab would count as one,
    but tabs are not allowed either)
  - no tab characters
  - no trailing whitespace (spaces, tabs, a carriage return)

Prints FILE:LINE: what for each offence, then a count, and exits 1 when there is any.
Usage: scripts/lint.py [ROOT] (default: the repository this script is in)."""
import os
import sys

MAX_COLUMNS = 120
DIRS = ("compiler", "runtime")


def sources(root):
    for d in DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith((".c", ".h")):
                    yield os.path.join(dirpath, f)


def lint_file(path, rel):
    problems = []
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    for i, line in enumerate(text.split("\n"), 1):
        if len(line.rstrip("\r")) > MAX_COLUMNS:
            problems.append("%s:%d: %d columns (at most %d)" % (rel, i, len(line.rstrip("\r")), MAX_COLUMNS))
        if "\t" in line:
            problems.append("%s:%d: tab" % (rel, i))
        if line != line.rstrip(" \t\r"):
            problems.append("%s:%d: trailing whitespace" % (rel, i))
    return problems


def main(argv):
    root = os.path.abspath(argv[1]) if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems, nfiles = [], 0
    for path in sources(root):
        nfiles += 1
        problems += lint_file(path, os.path.relpath(path, root))
    for p in problems:
        print(p)
    if problems:
        print("lint: %d problems in %d files" % (len(problems), nfiles))
        return 1
    print("lint: %d files clean" % nfiles)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
