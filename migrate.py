"""``raylink migrate FILE|DIR``: rewrite a PyFlink program's imports for raylink.

A PyFlink DataStream program runs on raylink once the module names of its import
statements are rewritten by one rule, first match wins:

====================================  =============================
``pyflink.common.typeinfo``           ``raylink.api.types``
``pyflink.common.configuration``      ``raylink.api.configuration``
``pyflink.datastream.data_stream``    ``raylink.api.datastream``
``pyflink.common[.X]``                ``raylink.api[.X]``
``pyflink.datastream[.X]``            ``raylink.api[.X]``
``pyflink[.X]``                       ``raylink[.X]``
====================================  =============================

Only the module names inside ``import`` / ``from ... import`` statements change (found
with :mod:`tokenize`, cross-checked against :mod:`ast`); comments, strings, the names
imported and every other byte of the file stay as they were. A program that uses
``pyflink`` as a name (``import pyflink.common`` then ``pyflink.common.Types``) gets a
warning with the lines to change by hand, since an import rename cannot fix those.

The module is a pure function of its input plus a small command line (``main``);
it has no state and is safe to call from several threads. It mirrors no Flink class:
Flink has no such tool (PyFlink's own programs need no rewrite).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import keyword
import os
import shutil
import sys
import tokenize
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from raylink.errors import RaylinkError

#: (PyFlink module prefix, raylink module prefix), first match wins
IMPORT_RULES: Tuple[Tuple[str, str], ...] = (
    ("pyflink.common.typeinfo", "raylink.api.types"),
    ("pyflink.common.configuration", "raylink.api.configuration"),
    ("pyflink.datastream.data_stream", "raylink.api.datastream"),
    ("pyflink.common", "raylink.api"),
    ("pyflink.datastream", "raylink.api"),
    ("pyflink", "raylink"),
)

_SKIP_TOKENS = frozenset({tokenize.NL, tokenize.COMMENT})
_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".venv", "venv", ".tox", "node_modules"})


def map_module(name: str) -> Optional[str]:
    """The raylink module for PyFlink module ``name``; ``None`` when no rule applies."""
    for prefix, replacement in IMPORT_RULES:
        if name == prefix or name.startswith(prefix + "."):
            return replacement + name[len(prefix) :]
    return None


@dataclass
class Rewrite:
    """One module name changed in one import statement."""

    line: int
    old: str
    new: str


@dataclass
class MigrationResult:
    """The migrated text of one source and what changed in it."""

    source: str
    text: str
    rewrites: List[Rewrite] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.text != self.source


class MigrationError(RaylinkError, ValueError):
    """The source could not be read as Python (its path and line are in the message)."""


# -- finding the module names of import statements ---------------------------------------------------
_Pos = Tuple[int, int]


def _significant(tokens: Sequence[tokenize.TokenInfo]) -> List[tokenize.TokenInfo]:
    return [t for t in tokens if t.type not in _SKIP_TOKENS]


def _dotted_name(toks: List[tokenize.TokenInfo], i: int) -> Tuple[Optional[Tuple[str, _Pos, _Pos]], int]:
    """The dotted name starting at ``toks[i]``: (name, start, end) and the index after it."""
    if i >= len(toks) or toks[i].type != tokenize.NAME or keyword.iskeyword(toks[i].string):
        return None, i
    parts, start, end = [toks[i].string], toks[i].start, toks[i].end
    i += 1
    while i + 1 < len(toks) and toks[i].string == "." and toks[i + 1].type == tokenize.NAME:
        parts.append(toks[i + 1].string)
        end = toks[i + 1].end
        i += 2
    return (".".join(parts), start, end), i


def _import_module_names(toks: List[tokenize.TokenInfo]) -> Iterator[Tuple[str, _Pos, _Pos]]:
    """Every absolute module name of an import statement in the token stream: the
    ``X.Y`` of ``from X.Y import ...`` and of each ``import X.Y [as Z]``."""
    n = len(toks)
    i = 0
    while i < n:
        tok = toks[i]
        if tok.type == tokenize.NAME and tok.string == "from":
            j = i + 1
            relative = False
            while j < n and toks[j].type == tokenize.OP and toks[j].string in (".", "..."):
                relative = True
                j += 1
            name, k = _dotted_name(toks, j)
            if k < n and toks[k].type == tokenize.NAME and toks[k].string == "import" and (name or relative):
                if name is not None and not relative:
                    yield name
                i = k + 1  # skip the imported names (they are not modules)
                while i < n and toks[i].type not in (tokenize.NEWLINE, tokenize.ENDMARKER) and toks[i].string != ";":
                    i += 1
                continue
            i += 1
            continue  # `yield from`, `raise ... from`
        if tok.type == tokenize.NAME and tok.string == "import":
            i += 1
            while True:
                name, i = _dotted_name(toks, i)
                if name is None:
                    break
                yield name
                if i < n and toks[i].type == tokenize.NAME and toks[i].string == "as":
                    i += 2
                if i < n and toks[i].string == ",":
                    i += 1
                    continue
                break
            continue
        i += 1


def _ast_import_modules(tree: ast.AST) -> List[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    return names


class _PyflinkNameUses(ast.NodeVisitor):
    """Lines that use a name bound by an unaliased ``import pyflink...`` (``pyflink.x.Y``)."""

    def __init__(self, bound: str) -> None:
        self.bound = bound
        self.lines: List[int] = []

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == self.bound:
            self.lines.append(node.lineno)


def _unaliased_pyflink_uses(tree: ast.AST) -> List[int]:
    bound = any(
        isinstance(node, ast.Import)
        and any(a.asname is None and (a.name == "pyflink" or a.name.startswith("pyflink.")) for a in node.names)
        for node in ast.walk(tree)
    )
    if not bound:
        return []
    visitor = _PyflinkNameUses("pyflink")
    visitor.visit(tree)
    return sorted(set(visitor.lines))


# -- rewriting ---------------------------------------------------------------------------------------
def migrate_source(source: str, filename: str = "<string>") -> MigrationResult:
    """Rewrite the PyFlink module names of ``source``'s import statements (the rule above)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        raise MigrationError(f"{filename}:{e.lineno}: not valid Python: {e.msg}") from None
    lines = io.StringIO(source).readlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as e:  # pragma: no cover - ast.parse caught it first
        raise MigrationError(f"{filename}: cannot tokenize: {e}") from None
    found = list(_import_module_names(_significant(tokens)))
    expected = _ast_import_modules(tree)
    if sorted(name for name, _, _ in found) != sorted(expected):  # pragma: no cover - a tokenizer gap
        raise MigrationError(
            f"{filename}: could not locate every import statement "
            f"(tokens {sorted(n for n, _, _ in found)} vs ast {sorted(expected)})"
        )
    result = MigrationResult(source=source, text=source)
    edits = []
    for name, start, end in found:
        new = map_module(name)
        if new is not None:
            edits.append((start, end, new))
            result.rewrites.append(Rewrite(start[0], name, new))
    for (srow, scol), (erow, ecol), new in sorted(edits, reverse=True):
        head = lines[srow - 1][:scol]
        tail = lines[erow - 1][ecol:]
        lines[srow - 1 : erow] = [head + new + tail]
    result.text = "".join(lines)
    for line in _unaliased_pyflink_uses(tree):
        result.warnings.append(
            f"{filename}:{line}: uses the name 'pyflink' (from 'import pyflink...'); "
            "rewrite that expression by hand or import the names it uses"
        )
    return result


def _read(path: str) -> Tuple[str, str]:
    with open(path, "rb") as f:
        data = f.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as e:
        raise MigrationError(f"{path}: not readable as {encoding}: {e}") from None


def migrate_file(path: str) -> Tuple[MigrationResult, str]:
    """The migration of the Python file at ``path`` and the file's encoding."""
    text, encoding = _read(path)
    return migrate_source(text, path), encoding


def python_files(root: str) -> List[str]:
    """``root`` itself, or every ``*.py`` file under the directory ``root`` (sorted)."""
    if os.path.isfile(root):
        return [root]
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        found.extend(os.path.join(folder, f) for f in sorted(files) if f.endswith(".py"))
    return found


def _target(path: str, root: str, output: Optional[str]) -> str:
    if output is None:
        return path
    if os.path.isfile(root):
        return os.path.join(output, os.path.basename(path)) if os.path.isdir(output) else output
    return os.path.join(output, os.path.relpath(path, root))


def _write(path: str, text: str, encoding: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding=encoding, newline="") as f:
        f.write(text)


def _copy_tree_except_python(root: str, output: str) -> None:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for f in files:
            if not f.endswith(".py"):
                dest = os.path.join(output, os.path.relpath(os.path.join(folder, f), root))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(os.path.join(folder, f), dest)


DESCRIPTION = (
    "Rewrite the pyflink imports of Python files for raylink "
    "(pyflink.common/.datastream -> raylink.api, pyflink -> raylink)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``raylink migrate``."""
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="Python files or directories (*.py, recursively)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="write nothing; list each import that would change")
    mode.add_argument("--diff", action="store_true", help="write nothing; print a unified diff")
    mode.add_argument("--stdout", action="store_true", help="write nothing; print the migrated sources")
    mode.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="write the migrated copy here instead of in place (a file or directory for "
        "one FILE, a directory for a DIR: the tree is copied, its .py files migrated)",
    )
    p.add_argument("--check", action="store_true", help="exit with 1 if any file would change")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-file report on stderr")


def register_cli(subparsers: Any) -> None:
    """Add ``migrate`` to the ``raylink`` CLI's sub-commands."""
    parser = subparsers.add_parser(
        "migrate", help="rewrite a PyFlink program's imports for raylink", description=f"raylink migrate: {DESCRIPTION}"
    )
    add_arguments(parser)
    parser.set_defaults(func=command)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m raylink.migrate``; returns the exit code (0 ok, 1 ``--check`` found work, 2 error)."""
    parser = argparse.ArgumentParser(prog="raylink migrate", description=DESCRIPTION)
    add_arguments(parser)
    return command(parser.parse_args(list(sys.argv[1:] if argv is None else argv)))


def command(args: argparse.Namespace) -> int:
    """Run ``raylink migrate`` for parsed ``args``; returns the exit code."""
    if args.output and len(args.paths) != 1:
        print("raylink migrate: --output takes exactly one FILE or DIR", file=sys.stderr)
        return 2
    status, changed_files, scanned = 0, 0, 0
    for root in args.paths:
        if not os.path.exists(root):
            print(f"raylink migrate: no such file or directory: {root}", file=sys.stderr)
            status = 2
            continue
        if args.output and os.path.isdir(root):
            _copy_tree_except_python(root, args.output)
        for path in python_files(root):
            scanned += 1
            try:
                result, encoding = migrate_file(path)
            except MigrationError as e:
                print(f"raylink migrate: {e}", file=sys.stderr)
                status = 2
                continue
            for warning in result.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            if result.changed:
                changed_files += 1
            if args.dry_run:
                for r in result.rewrites:
                    print(f"{path}:{r.line}: {r.old} -> {r.new}")
            elif args.diff:
                sys.stdout.writelines(
                    difflib.unified_diff(
                        result.source.splitlines(keepends=True),
                        result.text.splitlines(keepends=True),
                        fromfile=path,
                        tofile=path,
                    )
                )
            elif args.stdout:
                sys.stdout.write(result.text)
            elif not args.check:
                target = _target(path, root, args.output)
                if result.changed or target != path:
                    _write(target, result.text, encoding)
                if not args.quiet and result.changed:
                    print(
                        f"migrated {path}"
                        + (f" -> {target}" if target != path else "")
                        + f" ({len(result.rewrites)} import{'s' if len(result.rewrites) != 1 else ''})",
                        file=sys.stderr,
                    )
    if not args.quiet:
        verb = "would change" if (args.dry_run or args.diff or args.stdout or args.check) else "changed"
        print(
            f"raylink migrate: {scanned} file{'s' if scanned != 1 else ''} scanned, {changed_files} {verb}",
            file=sys.stderr,
        )
    if status == 0 and args.check and changed_files:
        return 1
    return status


__all__ = [
    "DESCRIPTION",
    "IMPORT_RULES",
    "MigrationError",
    "MigrationResult",
    "Rewrite",
    "add_arguments",
    "command",
    "main",
    "map_module",
    "migrate_file",
    "migrate_source",
    "python_files",
    "register_cli",
]


if __name__ == "__main__":
    sys.exit(main())
