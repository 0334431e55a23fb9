"""``raylink migrate``: the import rule of issue 16, applied only to import statements."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from raylink.migrate import MigrationError, main, map_module, migrate_source

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "pyflink, raylink",
    [
        ("pyflink.common.typeinfo", "raylink.api.types"),
        ("pyflink.common.configuration", "raylink.api.configuration"),
        ("pyflink.datastream.data_stream", "raylink.api.datastream"),
        ("pyflink.common", "raylink.api"),
        ("pyflink.common.types", "raylink.api.types"),
        ("pyflink.common.watermark_strategy", "raylink.api.watermark_strategy"),
        ("pyflink.datastream", "raylink.api"),
        ("pyflink.datastream.window", "raylink.api.window"),
        ("pyflink.datastream.connectors.file_system", "raylink.api.connectors.file_system"),
        ("pyflink", "raylink"),
        ("pyflink.table", "raylink.table"),
        ("pyflink.table.expressions", "raylink.table.expressions"),
        ("pyflinkx", None),
        ("mypyflink.common", None),
        ("os.path", None),
    ],
)
def test_the_rule_first_match_wins(pyflink, raylink):
    assert map_module(pyflink) == raylink


def test_only_module_names_of_import_statements_change():
    source = textwrap.dedent('''\
        # -*- coding: utf-8 -*-
        """Docs say: from pyflink.common import Types"""
        import sys, pyflink.datastream as ds
        from pyflink.common.typeinfo import Types
        from pyflink.common import (Row,  # pyflink.common in a comment
            WatermarkStrategy)
        from pyflink.datastream.connectors.file_system import FileSink ; import pyflink.table as t
        from . import sibling
        from .pyflink import x
        from \\
          pyflink.datastream.functions import MapFunction
        def f():
            from pyflink.common.configuration import Configuration
            raise ValueError("pyflink.common") from None
        text = "import pyflink.common"
        from pyflinkish import y
        ''')
    result = migrate_source(source)
    assert result.text == textwrap.dedent('''\
        # -*- coding: utf-8 -*-
        """Docs say: from pyflink.common import Types"""
        import sys, raylink.api as ds
        from raylink.api.types import Types
        from raylink.api import (Row,  # pyflink.common in a comment
            WatermarkStrategy)
        from raylink.api.connectors.file_system import FileSink ; import raylink.table as t
        from . import sibling
        from .pyflink import x
        from \\
          raylink.api.functions import MapFunction
        def f():
            from raylink.api.configuration import Configuration
            raise ValueError("pyflink.common") from None
        text = "import pyflink.common"
        from pyflinkish import y
        ''')
    assert [(r.line, r.old, r.new) for r in result.rewrites] == [
        (3, "pyflink.datastream", "raylink.api"),
        (4, "pyflink.common.typeinfo", "raylink.api.types"),
        (5, "pyflink.common", "raylink.api"),
        (7, "pyflink.datastream.connectors.file_system", "raylink.api.connectors.file_system"),
        (7, "pyflink.table", "raylink.table"),
        (11, "pyflink.datastream.functions", "raylink.api.functions"),
        (13, "pyflink.common.configuration", "raylink.api.configuration"),
    ]
    assert result.warnings == []
    compile(result.text, "<migrated>", "exec")


def test_an_untouched_program_is_returned_byte_for_byte():
    source = "import os\r\nfrom typing import Any\r\nx = 1  # pyflink\r\n"
    result = migrate_source(source)
    assert result.text == source and not result.changed and result.rewrites == []


def test_crlf_line_endings_are_kept():
    result = migrate_source("from pyflink.common import Types\r\nprint(Types)\r\n")
    assert result.text == "from raylink.api import Types\r\nprint(Types)\r\n"


def test_using_the_name_pyflink_gets_a_warning_with_its_lines():
    result = migrate_source("import pyflink.common\n\nt = pyflink.common.Types.INT()\n", "job.py")
    assert result.text.startswith("import raylink.api\n")
    assert result.warnings == [
        "job.py:3: uses the name 'pyflink' (from 'import pyflink...'); "
        "rewrite that expression by hand or import the names it uses"
    ]


def test_invalid_python_names_the_file_and_line():
    with pytest.raises(MigrationError, match=r"bad\.py:2: not valid Python"):
        migrate_source("import os\nfrom pyflink import (\n", "bad.py")


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_main_rewrites_a_directory_in_place(tmp_path, capsys):
    _write(str(tmp_path / "a.py"), "from pyflink.datastream import StreamExecutionEnvironment\n")
    _write(str(tmp_path / "pkg" / "b.py"), "import pyflink.common.typeinfo as ti\n")
    _write(str(tmp_path / "pkg" / "c.py"), "import os\n")
    _write(str(tmp_path / "notes.txt"), "from pyflink.common import Types\n")
    assert main([str(tmp_path)]) == 0
    assert (tmp_path / "a.py").read_text() == "from raylink.api import StreamExecutionEnvironment\n"
    assert (tmp_path / "pkg" / "b.py").read_text() == "import raylink.api.types as ti\n"
    assert (tmp_path / "pkg" / "c.py").read_text() == "import os\n"
    assert (tmp_path / "notes.txt").read_text() == "from pyflink.common import Types\n"
    assert "3 files scanned, 2 changed" in capsys.readouterr().err


def test_dry_run_diff_and_stdout_write_nothing(tmp_path, capsys):
    job = tmp_path / "job.py"
    original = "from pyflink.common import Types\nprint(Types)\n"
    job.write_text(original)
    assert main(["--dry-run", str(job)]) == 0
    assert capsys.readouterr().out == f"{job}:1: pyflink.common -> raylink.api\n"
    assert main(["--diff", str(job)]) == 0
    out = capsys.readouterr().out
    assert "-from pyflink.common import Types\n+from raylink.api import Types\n" in out
    assert main(["--stdout", str(job)]) == 0
    assert capsys.readouterr().out == "from raylink.api import Types\nprint(Types)\n"
    assert main(["--check", str(job)]) == 1
    assert job.read_text() == original


def test_output_copies_a_tree_and_migrates_its_python_files(tmp_path):
    src = tmp_path / "src"
    _write(str(src / "job.py"), "from pyflink.datastream import StreamExecutionEnvironment\n")
    _write(str(src / "data" / "input.txt"), "hello\n")
    out = tmp_path / "out"
    assert main(["-q", "-o", str(out), str(src)]) == 0
    assert (out / "job.py").read_text() == "from raylink.api import StreamExecutionEnvironment\n"
    assert (out / "data" / "input.txt").read_text() == "hello\n"
    assert (src / "job.py").read_text() == "from pyflink.datastream import StreamExecutionEnvironment\n"


def test_errors_exit_with_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing.py")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    assert main([str(bad)]) == 2
    assert f"{bad}:1: not valid Python" in capsys.readouterr().err


def test_python_dash_m_raylink_migrate(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("from pyflink.common import Types\n")
    proc = subprocess.run(
        [sys.executable, "-m", "raylink.migrate", str(job)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert job.read_text() == "from raylink.api import Types\n"
    assert f"migrated {job} (1 import)" in proc.stderr


def test_register_cli_adds_the_migrate_sub_command(tmp_path, capsys):
    import argparse

    from raylink.migrate import register_cli

    job = tmp_path / "job.py"
    job.write_text("import pyflink.datastream as ds\n")
    parser = argparse.ArgumentParser(prog="raylink")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["migrate", "--dry-run", str(job)])
    assert args.func(args) == 0
    assert capsys.readouterr().out == f"{job}:1: pyflink.datastream -> raylink.api\n"
