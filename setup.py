"""Build of the optional native extensions (Kineto columniser, nsys SQLite column reader); everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and the loader uses its pure-Python
path (same results, slower on large traces)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "aiprof.trace.kineto._columnar",
            ["src/aiprof/trace/kineto/_columnar.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "aiprof.trace.readers._sqlcols",
            ["src/aiprof/trace/readers/_sqlcols.c"],
            optional=True,
            libraries=["sqlite3"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
    ]
)
