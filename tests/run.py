#!/usr/bin/env python3
"""run.py: llmcc's test runner. Runs every test_* function of tests/test_*.py
(or of the modules named on the command line, `-k WORD` filters by name) and
ends with the line `N passed, N failed, N skipped`."""
import importlib
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import Skip  # noqa: E402


def main():
    args = sys.argv[1:]
    key = None
    if "-k" in args:
        i = args.index("-k")
        key = args[i + 1]
        del args[i:i + 2]
    here = os.path.dirname(os.path.abspath(__file__))
    mods = args or sorted(f[:-3] for f in os.listdir(here) if f.startswith("test_") and f.endswith(".py"))
    passed = failed = skipped = 0
    failures = []
    for m in mods:
        mod = importlib.import_module(m.replace(".py", ""))
        for name in sorted(n for n in dir(mod) if n.startswith("test_") and callable(getattr(mod, n))):
            full = "%s.%s" % (mod.__name__, name)
            if key and key not in full:
                continue
            t0 = time.time()
            try:
                getattr(mod, name)()
            except Skip as e:
                skipped += 1
                print("SKIP %s: %s" % (full, e), flush=True)
                continue
            except Exception:
                failed += 1
                failures.append(full)
                print("FAIL %s (%.1fs)\n%s" % (full, time.time() - t0, traceback.format_exc()), flush=True)
                continue
            passed += 1
            print("ok   %s (%.1fs)" % (full, time.time() - t0), flush=True)
    if failures:
        print("failed: " + ", ".join(failures))
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
