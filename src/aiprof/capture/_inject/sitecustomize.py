"""Loaded by every Python process that ``aiprof run`` starts (its folder is first on PYTHONPATH).

It hands over to ``aiprof.capture.bootstrap`` and then runs the ``sitecustomize`` this one shadows,
if the environment has one, so a distribution's own start-up code still runs.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("AIPROF_CAPTURE"):
    try:
        from aiprof.capture import bootstrap

        bootstrap.install()
    except Exception as _err:  # noqa: BLE001 - never break the user's script
        sys.stderr.write(f"aiprof: warning: profiling was not injected into {sys.argv[:1]}: {_err}\n")


def _chain() -> None:
    others = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _chain()
except Exception as _err:  # noqa: BLE001
    sys.stderr.write(f"aiprof: warning: the environment's sitecustomize failed: {_err}\n")
