"""The compiled fast paths: every ``ckinspect/_native/*.c`` is built as ``ckinspect._native.<name>``.

Each extension is optional: without a C compiler (or on an interpreter it does not build for) setuptools
skips it and ckinspect runs its pure-Python fallback, which gives the same answers (the tests run both).
Everything else about the package is declared in pyproject.toml.
"""

from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
EXTENSIONS = [
    Extension(
        f"ckinspect._native.{source.stem}",
        [source.relative_to(HERE).as_posix()],
        optional=True,
    )
    for source in sorted((HERE / "ckinspect" / "_native").glob("*.c"))
]

setup(ext_modules=EXTENSIONS)
