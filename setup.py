"""Build of the optional native extensions (Kineto columniser, memory snapshot scanner, nsys SQLite column
reader); everything else is in pyproject.toml.

``optional=True``: without a C compiler (or, for the nsys reader, without SQLite's header and library) the
install still succeeds and the loaders use their pure-Python paths (same results, slower on large traces)."""

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
            "aiprof.memory._snapscan",
            ["src/aiprof/memory/_snapscan.c"],
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
