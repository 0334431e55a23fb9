"""``raylink demo``: the clicks demo (``examples/clicks_demo.py``): a Spark table, a raylink
job on Ray, Spark tables out; it starts a local Ray and Spark-on-Ray itself.

``examples/`` is not a package: the demo module is loaded from this checkout's file.
Not thread-safe (a command line runs once per process).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from types import ModuleType

DEMO_MODULE = "raylink_examples_clicks_demo"


def demo_module() -> ModuleType:
    """``examples/clicks_demo.py`` of this checkout, loaded once."""
    if DEMO_MODULE in sys.modules:
        return sys.modules[DEMO_MODULE]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "examples", "clicks_demo.py")
    if not os.path.isfile(path):
        raise SystemExit(f"raylink demo: {path} is missing (the demo ships with a raylink checkout)")
    spec = importlib.util.spec_from_file_location(DEMO_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[DEMO_MODULE] = module
    spec.loader.exec_module(module)
    return module


def cmd_demo(args: argparse.Namespace) -> int:
    """``raylink demo [--rows N] [--users N] [--parallelism N] [--warehouse DIR]``."""
    if getattr(args, "args", None):
        raise SystemExit(f"raylink demo: unexpected arguments {args.args}")
    demo_module().run(args.rows, args.users, args.parallelism, args.warehouse)
    return 0
