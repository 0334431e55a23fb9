"""Build of the compiled per-record path (``raylink.shuffle._hotpath`` and ``raylink.core._row``, Cython).

Everything else about the package is declared in pyproject.toml. The extension is optional:
without Cython or a C compiler the build warns and raylink runs on its pure-Python twins
(``raylink.shuffle.hotpath`` and ``raylink.core.row`` pick whichever is there). For an editable
install the modules are built in place, next to their .pyx; ``scripts/setup.sh`` rebuilds them
when a .pyx changes.
"""

import warnings

from setuptools import Extension, setup

#: the compiled modules' sources (each has a pure-Python twin; scripts/setup.sh lists them too)
COMPILED = ("shuffle/_hotpath.pyx", "core/_row.pyx")


def _ext_modules() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython: the pure-Python path
        warnings.warn("raylink: Cython is not installed; the compiled per-record path is not built")
        return []
    try:
        modules = cythonize(
            [Extension(f"raylink.{path[:-4].replace('/', '.')}", [path]) for path in COMPILED],
            build_dir="build/cython",  # the generated C stays out of the source tree
            language_level=3,
            quiet=True,
        )
    except Exception as e:  # a Cython error: warn, and run on the pure-Python twins
        warnings.warn(f"raylink: the compiled per-record path is not built: {e}")
        return []
    for module in modules:  # a failing C compile warns instead of failing the install (cythonize drops the flag)
        module.optional = True
    return modules


if __name__ == "__main__":  # pip's build backend runs it so; importing it (a walk of raylink) builds nothing
    setup(ext_modules=_ext_modules())
