"""``raylink config [KEY] [--markdown]``: the options registry as a table.

Every option registered in :mod:`raylink.core.options` with its type, default and
description -- as plain text, as the Markdown table the README carries (a test
keeps the two equal), or one option in detail. An unknown key exits with 2 and the
closest known key. Pure formatting over the registry; no Ray.
"""

from __future__ import annotations

from typing import Any, Optional

from raylink.cli.common import EXIT_OK, EXIT_USAGE, CliError, reject_extra
from raylink.core import options as registry
from raylink.core.options import ConfigOption, find_option, unknown_key_message

UNITS_NOTE = (
    "Durations: `100`, `100 ms`, `2 s`, `1 min` (read as milliseconds); memory sizes: "
    "`1024`, `64kb`, `512m`, `2g` (binary units as in Flink, read as bytes)."
)
COLUMNS = ("KEY", "TYPE", "DEFAULT", "DESCRIPTION")


def group_of(option: ConfigOption) -> str:
    """The option class (``PipelineOptions``, ...) that declares ``option``."""
    for group in registry.OPTION_GROUPS:
        if option in registry.group_options(group):
            return group.__name__
    return "?"


def describe(option: ConfigOption) -> str:
    """The description, with the fallback (deprecated) keys the option also reads."""
    text = option.description
    if option.fallback_keys:
        text += " Fallback keys: " + ", ".join(option.fallback_keys) + "."
    return text


def _rows() -> list[tuple[str, str, str, str]]:
    return [(o.display_key, o.type, o.default_text(), describe(o)) for o in registry.all_options()]


def plain_table() -> str:
    """Every option, one line each, in the registry's group order."""
    rows = [COLUMNS, *_rows()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)) + "  " + row[3] for row in rows]
    return "\n".join(lines) + "\n\n" + UNITS_NOTE.replace("`", "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    """The README's option table (``raylink config --markdown``)."""
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for option in registry.all_options():
        default = f"`{_cell(option.default_text())}`" if option.has_default else "(none)"
        lines.append(f"| `{option.display_key}` | {option.type} | {default} | {_cell(describe(option))} |")
    return "\n".join(lines) + "\n\n" + UNITS_NOTE


def option_details(key: str) -> str:
    """One option in detail: key, type (and values), default, group, fallback keys, description."""
    option = find_option(key)
    if option is None:
        raise CliError(EXIT_USAGE, f"raylink config: {unknown_key_message(key)}")
    fields: list[tuple[str, Any]] = [("key", option.display_key)]
    if key != option.key and not option.prefix:
        fields.append(("note", f"{key} is a fallback key of {option.key}"))
    fields.append(("type", option.type))
    if option.choices:
        fields.append(("values", ", ".join(option.choices)))
    if option.unsupported:
        fields.append(("not supported yet", ", ".join(option.unsupported)))
    fields += [("default", option.default_text()), ("group", group_of(option))]
    if option.fallback_keys:
        fields.append(("fallback keys", ", ".join(option.fallback_keys)))
    fields.append(("description", option.description))
    width = max(len(name) for name, _ in fields) + 1
    return "\n".join(f"{(name + ':').ljust(width)} {value}" for name, value in fields)


def cmd_config(args: Any) -> int:
    """``raylink config``: the table, ``--markdown`` the README's, ``KEY`` one option."""
    reject_extra(args, "config")
    key: Optional[str] = getattr(args, "key", None)
    if key:
        print(option_details(key))
    elif args.markdown:
        print(markdown_table())
    else:
        print(plain_table())
    return EXIT_OK
