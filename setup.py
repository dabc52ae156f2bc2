"""Build of the optional native columniser; everything else is in pyproject.toml.

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
            "aiprof.memory._snapscan",
            ["src/aiprof/memory/_snapscan.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
    ]
)
