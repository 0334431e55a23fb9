"""PyFlink's DataStream API surface and what raylink supports of it, as a Markdown table.

    .venv/bin/python scripts/pyflink_surface.py [--pyflink-python PATH] [--write README.md]

Walks the public classes (and their public methods, nested classes and enum members) of
every module of ``pyflink.common`` and ``pyflink.datastream`` in an installed PyFlink
(leaving out the bridge to its JVM: methods named ``*java*``, the internal-type
conversions, the window serializers)
(default: ``/tmp/pyflink-venv/bin/python``, a venv with ``apache-flink==2.3.0``), looks each
one up where ``raylink migrate``'s import rule sends it (``pyflink.common[.X]`` ->
``raylink.api[.X]`` ...) and prints one row per class: supported (every method there),
partial (the missing methods listed), not supported (a stand-in that raises naming the
alternative: Java connectors and formats) or missing. With ``--write`` the table replaces
the part of the file between the ``pyflink-surface`` markers. Nothing of PyFlink is
copied: only names are compared.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from raylink.migrate import map_module  # noqa: E402

START = "<!-- pyflink-surface:start -->"
END = "<!-- pyflink-surface:end -->"

#: runs under PyFlink's interpreter: prints the surface as JSON
_DUMPER = r"""
import enum, inspect, json, pkgutil, sys, warnings
warnings.simplefilter("ignore")
import pyflink, pyflink.common, pyflink.datastream

SKIP_MODULES = ("utils", "constants", "io", "serializer")
# the bridge to PyFlink's JVM, not API: wrapped Java objects and Java-side type conversion
INTERNAL = {"to_internal_type", "from_internal_type", "need_conversion"}

def internal(name):
    return "java" in name or name in INTERNAL

def methods(cls):
    found = set()
    for klass in cls.__mro__:
        if klass is object or not klass.__module__.startswith("pyflink"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or inspect.isclass(value) or internal(name):
                continue
            if isinstance(value, (staticmethod, classmethod, property)) or callable(value):
                found.add(name)
    return sorted(found)

def describe(cls):
    if issubclass(cls, enum.Enum):
        return {"kind": "enum", "members": [m.name for m in cls]}
    nested = {n: describe(v) for n, v in vars(cls).items()
              if inspect.isclass(v) and not n.startswith("_") and v.__module__.startswith("pyflink")
              and v.__qualname__.startswith(cls.__qualname__ + ".")}
    return {"kind": "class", "methods": methods(cls), "nested": nested}

out = {"version": getattr(pyflink, "__version__", None), "modules": {}, "exports": {}}
try:
    from pyflink.version import __version__ as v
    out["version"] = v
except ImportError:
    pass
for pkg in (pyflink.common, pyflink.datastream):
    out["exports"][pkg.__name__] = sorted(getattr(pkg, "__all__", []))
    names = [pkg.__name__] + [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
    for name in names:
        if ".tests" in name or name.rsplit(".", 1)[-1] in SKIP_MODULES:
            continue
        module = __import__(name, fromlist=["*"])
        public = getattr(module, "__all__", None)
        classes = {}
        for attr, value in sorted(vars(module).items()):
            if attr.startswith("_") or not inspect.isclass(value) or value.__module__ != name:
                continue
            if attr.endswith("Serializer") and attr != "TypeSerializer":  # window (de)serializers for the JVM
                continue
            if public is not None and attr not in public:
                continue
            classes[attr] = describe(value)
        functions = sorted(a for a, v in vars(module).items() if not a.startswith("_") and inspect.isfunction(v)
                           and v.__module__ == name and (public is None or a in public))
        if classes or functions:
            out["modules"][name] = {"classes": classes, "functions": functions}
print(json.dumps(out))
"""


def dump_pyflink(python: str) -> dict:
    proc = subprocess.run([python, "-c", _DUMPER], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"could not read PyFlink's surface with {python}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _import(module: Optional[str]) -> Any:
    if module is None:
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _is_stand_in(obj: Any) -> bool:
    return type(obj).__name__ == "_UnsupportedMeta" or getattr(obj, "__name__", "") == "stand_in"


def _status(pyflink_obj: dict, raylink_obj: Any, prefix: str = "") -> "tuple[int, int, list]":
    """(supported, total, missing names) of a class's methods / members / nested classes."""
    missing, total = [], 0
    if pyflink_obj["kind"] == "enum":
        for member in pyflink_obj["members"]:
            total += 1
            if not hasattr(raylink_obj, member):
                missing.append(prefix + member)
        return total - len(missing), total, missing
    for method in pyflink_obj["methods"]:
        total += 1
        if not hasattr(raylink_obj, method):
            missing.append(prefix + method)
    for name, nested in pyflink_obj["nested"].items():
        inner = getattr(raylink_obj, name, None)
        if inner is None:
            n, t, _ = _status(nested, None, "")
            total += t + 1
            missing.append(f"{prefix}{name} (class)")
            continue
        n, t, m = _status(nested, inner, f"{prefix}{name}.")
        total += t
        missing.extend(m)
    return total - len(missing), total, missing


def build_rows(surface: dict) -> "list[dict]":
    rows = []
    for module, content in sorted(surface["modules"].items()):
        target = map_module(module)
        raylink_module = _import(target)
        for name, obj in sorted(content["classes"].items()):
            raylink_obj = getattr(raylink_module, name, None) if raylink_module is not None else None
            if raylink_obj is None:
                status, detail = "missing", f"no `{target}.{name}`" if raylink_module else f"no module `{target}`"
                n, t = 0, None
            elif _is_stand_in(raylink_obj):
                status, detail, n, t = "not supported", "importable; raises naming the alternative", 0, None
            else:
                n, t, missing = _status(obj, raylink_obj)
                status = "supported" if not missing else "partial"
                detail = ", ".join(f"`{m}`" for m in missing)
            rows.append(
                {"module": module, "name": name, "status": status, "supported": n, "total": t, "detail": detail}
            )
        for function in content["functions"]:
            found = getattr(raylink_module, function, None) if raylink_module is not None else None
            status = "missing" if found is None else "not supported" if _is_stand_in(found) else "supported"
            rows.append(
                {
                    "module": module,
                    "name": function + "()",
                    "status": status,
                    "supported": None,
                    "total": None,
                    "detail": "" if found is not None else f"no `{target}.{function}`",
                }
            )
    return rows


def missing_exports(surface: dict) -> "list[str]":
    """Names ``pyflink.common`` / ``pyflink.datastream`` export that ``raylink.api`` lacks."""
    api = importlib.import_module("raylink.api")
    return sorted({n for names in surface["exports"].values() for n in names if not hasattr(api, n)})


def to_markdown(surface: dict, rows: "list[dict]") -> str:
    counts: dict = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines = [
        START,
        f"Generated by `scripts/pyflink_surface.py` from PyFlink {surface.get('version') or '2.3'} "
        "(`pyflink.common` and `pyflink.datastream`, every module): each public class and function, "
        "looked up where `raylink migrate` sends its import. "
        + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("supported", "partial", "not supported", "missing"))
        + ". *Methods* counts the class's public methods (enum members, nested classes' methods) "
        "raylink has (PyFlink's JVM bridge — `get_java_*`, internal-type conversions — left out); "
        "*Missing* names the others. *Not supported*: importable stand-ins that raise "
        "`UnsupportedFeatureError` naming raylink's alternative (Java connectors and formats).",
        "",
    ]
    gaps = missing_exports(surface)
    if gaps:
        lines += [
            "Names `pyflink.common` / `pyflink.datastream` export that `raylink.api` does not: "
            + ", ".join(f"`{g}`" for g in gaps)
            + ".",
            "",
        ]
    lines += ["| PyFlink module | Class | Status | Methods | Missing |", "|---|---|---|---|---|"]
    stand_ins: dict = {}  # a module of stand-ins is one row
    for row in rows:
        if row["status"] == "not supported":
            stand_ins.setdefault(row["module"], []).append(row["name"])
    for row in rows:
        module = row["module"].replace("pyflink.", "", 1)
        if row["status"] == "not supported":
            names = stand_ins.pop(row["module"], None)
            if names:
                lines.append(
                    f"| `{module}` | {', '.join(f'`{n}`' for n in names)} | not supported | | "
                    "importable; using one raises naming the alternative |"
                )
            continue
        methods = "" if row["total"] is None else f"{row['supported']}/{row['total']}"
        lines.append(f"| `{module}` | `{row['name']}` | {row['status']} | {methods} | {row['detail']} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(path: str, markdown: str, heading: str) -> None:
    with open(path) as f:
        text = f.read()
    if START in text and END in text:
        text = re.sub(re.escape(START) + r".*?" + re.escape(END) + r"\n?", lambda _: markdown, text, flags=re.S)
    else:
        text = text.rstrip("\n") + f"\n\n{heading}\n\n" + markdown
    with open(path, "w") as f:
        f.write(text)


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pyflink-python", default=os.environ.get("RAYLINK_PYFLINK_PYTHON", "/tmp/pyflink-venv/bin/python"))
    p.add_argument("--write", metavar="README", help="replace the table section of this file")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    args = p.parse_args(argv)
    surface = dump_pyflink(args.pyflink_python)
    rows = build_rows(surface)
    if args.json:
        print(json.dumps({"rows": rows, "missing_exports": missing_exports(surface)}, indent=1))
        return 0
    markdown = to_markdown(surface, rows)
    if args.write:
        write_section(args.write, markdown, "## PyFlink DataStream API surface")
    else:
        sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
