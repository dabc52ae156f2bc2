"""Metadata of a run: versions, machine, devices, command line and a few environment variables.

Environment variables are copied only from an explicit allow-list: traces found in the wild leak
tokens (HF_TOKEN, WANDB_API_KEY, AWS keys) through exactly this field (the list lives in
:mod:`aiprof.rundir`, which filters it again on reading). The command line is kept, with every secret in it
replaced (:mod:`aiprof.redact`: by name, by token shape, URL passwords).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiprof.redact import redact_argv
from aiprof.rundir import ENV_ALLOW_LIST

if TYPE_CHECKING:  # msgspec is imported only when a process writes its metadata, never by ``import aiprof``
    from aiprof.runmeta import HostInfo, TorchInfo

__all__ = ["ENV_ALLOW_LIST", "allowed_env", "cpu_model", "host_info", "redact_command", "torch_info"]


def allowed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed variables that are set; nothing else, ever."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in ENV_ALLOW_LIST if name in env}


def redact_command(argv: Sequence[str]) -> list[str]:
    """The command line with every secret value hidden: by option name, by token shape, URL passwords
    (:func:`aiprof.redact.redact_argv`)."""
    return redact_argv(argv)


def cpu_model() -> str:
    """The CPU's marketing name: /proc/cpuinfo on Linux, platform elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> HostInfo:
    """Machine facts that explain a timing: CPU, cores, memory, OS, Python (``meta.json``'s ``host``:
    ``msgspec.to_builtins`` of it)."""
    from aiprof.runmeta import HostInfo

    info = HostInfo(
        hostname=socket.gethostname(),
        os=platform.platform(),
        python=sys.version.split()[0],
        cpu_model=cpu_model(),
        cores_logical=os.cpu_count(),
    )
    try:
        info.cores_available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    try:
        import psutil

        info.cores_physical = psutil.cpu_count(logical=False)
        info.memory_bytes = int(psutil.virtual_memory().total)
    except ImportError:
        pass
    return info


def torch_info() -> TorchInfo:
    """Versions and devices as seen by torch in the profiled process (torch is imported there already)."""
    import torch

    from aiprof.runmeta import DeviceMeta, TorchInfo

    devices = [DeviceMeta(type="cpu", name=cpu_model())]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(DeviceMeta(
                type="cuda",
                index=index,
                name=props.name,
                memory_bytes=int(props.total_memory),
                capability=f"{props.major}.{props.minor}",
                sms=int(props.multi_processor_count),
            ))
    return TorchInfo(
        torch=str(torch.__version__),
        cuda=torch.version.cuda,
        cudnn=_cudnn_version(torch),
        torch_threads=torch.get_num_threads(),
        devices=devices,
    )


def _cudnn_version(torch: Any) -> int | None:
    try:
        version = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - a CPU build may raise on query
        return None
    return int(version) if version else None
