"""A trivial program on the local target loads only what it runs: no Ray, no filesystem
layer (fsspec, and asyncio with it), no RocksDB, no Arrow, no web server. Each costs tens to
hundreds of milliseconds of a run that takes about half a second in all (``bench/startup.py``)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

PROGRAM = """
import sys
from raylink.api import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.from_collection(["to be or not to be"]).flat_map(lambda line: [(w, 1) for w in line.split()]).key_by(
    lambda kv: kv[0]
).sum(1).print()
env.execute("word count")
print("LOADED", sorted({m.split(".")[0] for m in sys.modules}))
"""

NOT_LOADED = ("ray", "fsspec", "asyncio", "rocksdict", "pyarrow", "aiohttp", "pyspark", "pandas")


@pytest.mark.timeout(120)
def test_a_trivial_local_program_loads_no_ray_filesystem_rocksdb_or_arrow(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYLINK_CONF")}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(lines[:-1]) == sorted(
        ["1> ('be', 1)", "1> ('not', 1)", "1> ('be', 2)", "2> ('to', 1)", "2> ('or', 1)", "2> ('to', 2)"]
    )
    loaded = set(ast.literal_eval(lines[-1].removeprefix("LOADED ")))
    assert not loaded & set(NOT_LOADED), f"loaded by a trivial local program: {sorted(loaded & set(NOT_LOADED))}"
