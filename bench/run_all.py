"""Run the benchmark scripts in one go and print one table of ratios against their in-run baselines.

Each script (``bench/chain.py``, ``bench/serde.py``, ``bench/wordcount.py``) measures
raylink next to a baseline in the same run and prints a table whose last column is
the ratio to that baseline; this runs their ``main(argv)`` with small sizes (or the
documented sizes with ``--full``), captures those tables and prints the rows together.

    python -m raylink.bench.run_all [--full] [--only chain,serde,wordcount] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import time
from typing import Callable, Optional

# (name, module, small argv, full argv: the sizes each script documents as its default)
BENCHES = [
    ("chain", "raylink.bench.chain", ["--records", "200000", "--repeat", "2"], []),
    ("serde", "raylink.bench.serde", ["--records", "100000", "--repeat", "2"], []),
    ("wordcount", "raylink.bench.wordcount", ["--words", "200000", "--repeat", "1"], []),
]

_RATIO = re.compile(r"^(?P<label>.*?\S)\s{2,}.*?(?P<ratio>\d+(?:\.\d+)?)x?$")


def parse_rows(text: str) -> list[tuple[str, float]]:
    """``(row label, ratio)`` for every table row whose last column is a ratio (``1.23`` or ``1.23x``)."""
    rows = []
    for line in text.splitlines():
        line = line.rstrip()
        parts = line.split()
        if len(parts) < 3 or not re.fullmatch(r"\d+(?:\.\d+)x?", parts[-1]):
            continue
        if not re.fullmatch(r"[\d,.]+(?:x)?", parts[-2]) and not parts[-2].endswith("-"):
            continue
        m = _RATIO.match(line)
        if m:
            rows.append((m.group("label").strip(), float(m.group("ratio"))))
    return rows


def run_bench(main: Callable[[list], Optional[int]], argv: list) -> tuple[str, float, Optional[str]]:
    buf = io.StringIO()
    start = time.perf_counter()
    error = None
    with contextlib.redirect_stdout(buf):
        try:
            code = main(argv)
            if code:
                error = f"exit status {code}"
        except SystemExit as exc:
            if exc.code:
                error = f"exit status {exc.code}"
        except Exception as exc:  # noqa: BLE001 - one failing bench must not hide the others
            error = f"{type(exc).__name__}: {exc}"
    return buf.getvalue(), time.perf_counter() - start, error


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the documented (default) sizes of every script")
    parser.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(b[0] for b in BENCHES))
    parser.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    parser.add_argument("--verbose", action="store_true", help="print each script's own output too")
    args = parser.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    import importlib

    results = []
    failed = False
    for name, module, small, full in BENCHES:
        if only and name not in only:
            continue
        bench_argv = full if args.full else small
        print(f"running {name} {' '.join(bench_argv)} ...", file=sys.stderr, flush=True)
        text, seconds, error = run_bench(importlib.import_module(module).main, bench_argv)
        if args.verbose:
            print(text)
        rows = parse_rows(text)
        if error or not rows:
            failed = True
            error = error or "no table rows found in its output"
        results.append(
            {
                "bench": name,
                "argv": bench_argv,
                "seconds": round(seconds, 1),
                "title": text.strip().splitlines()[0] if text.strip() else "",
                "error": error,
                "rows": [{"variant": label, "ratio": ratio} for label, ratio in rows],
            }
        )

    width = max([len("variant")] + [len(r["variant"]) for res in results for r in res["rows"]])
    print(f"{'bench':<10} {'variant'.ljust(width)} {'ratio':>7}")
    for res in results:
        if res["error"]:
            print(f"{res['bench']:<10} {'FAILED: ' + res['error']}")
        for row in res["rows"]:
            print(f"{res['bench']:<10} {row['variant'].ljust(width)} {row['ratio']:>6.2f}x")
    print(
        "ratio: each script's own last column against its in-run baseline (chain: plain Python loop = 1; "
        "serde: bare msgpack = 1; wordcount: plain Python loop = 1)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
