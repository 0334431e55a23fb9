"""Regenerate the README's option table from the options registry (raylink.api.options).

    .venv/bin/python scripts/readme_options.py

tests/test_options_registry.py fails when the README's table and the registry differ.
"""

import pathlib
import re

from raylink.cli.config import markdown_table

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
text = README.read_text()
new, count = re.subn(
    r"(<!-- options:start[^>]*-->\n)(.*?)(\n<!-- options:end -->)",
    lambda m: m.group(1) + markdown_table() + m.group(3),
    text,
    flags=re.S,
)
if count != 1:
    raise SystemExit(f"{README}: expected one <!-- options:start --> ... <!-- options:end --> block")
README.write_text(new)
