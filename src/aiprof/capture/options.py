"""What to record: the torch.profiler schedule, the profiler switches, telemetry and step detection.

One frozen dataclass so the CLI, the Python API and the injected child process agree; it travels to
the child as JSON in an environment variable (``AIPROF_CAPTURE``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from aiprof.errors import AiprofError


@dataclass(frozen=True)
class Schedule:
    """torch.profiler's schedule, counted in steps from the start of capture.

    The default skips the first steps (allocation, warm caches, lazy init), warms the profiler up for
    two steps and records four steady-state steps once: a few steps are enough for a diagnosis and
    keep the overhead of the whole run near zero.
    """

    wait: int = 5
    warmup: int = 2
    active: int = 4
    repeat: int = 1
    skip_first: int = 0

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "active", "repeat", "skip_first"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise AiprofError(f"schedule: {name} must be an integer >= 0, got {value!r}")
        if self.active < 1:
            raise AiprofError("schedule: active must be >= 1, or nothing is ever recorded")

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    def steps_needed(self) -> int:
        """Steps the script must run for the first recorded cycle to complete."""
        return self.skip_first + self.cycle

    def recorded_steps(self, total: int) -> list[int]:
        """Step numbers (0-based, as in ``ProfilerStep#N``) recorded when the script runs ``total`` steps."""
        out: list[int] = []
        for step in range(self.skip_first, total):
            k = step - self.skip_first
            if self.repeat and k // self.cycle >= self.repeat:
                break
            if k % self.cycle >= self.wait + self.warmup:
                out.append(step)
        return out

    def idle_until(self, step: int) -> float:
        """The first step number >= ``step`` at which the schedule warms up or records (``math.inf`` when it
        never does again): ``torch.profiler.schedule``'s arithmetic, for the steps it answers NONE."""
        k = step - self.skip_first
        if k < 0:
            return self.skip_first + self.wait
        if self.repeat and k >= self.repeat * self.cycle:
            return math.inf
        mod = k % self.cycle
        return step if mod >= self.wait else step + self.wait - mod

    def describe(self) -> str:
        first = self.recorded_steps(self.steps_needed())
        span = f"steps {first[0]}-{first[-1]}" if len(first) > 1 else f"step {first[0]}"
        cycles = "once" if self.repeat == 1 else ("in every cycle" if self.repeat == 0 else f"{self.repeat} cycles")
        return f"records {span} ({self.active} step(s), {cycles}); the script must run at least {self.steps_needed()} steps"

    @classmethod
    def coerce(cls, value: Schedule | tuple[int, ...] | list[int] | dict[str, int] | None) -> Schedule:
        """Accept a Schedule, a (wait, warmup, active[, repeat]) tuple or a dict, for the Python API."""
        if value is None:
            return cls()
        if isinstance(value, Schedule):
            return value
        if isinstance(value, dict):
            return cls(**value)
        if isinstance(value, (tuple, list)) and 3 <= len(value) <= 5:
            return cls(*value)
        raise AiprofError(f"schedule: expected Schedule(wait, warmup, active, repeat) or a tuple, got {value!r}")


@dataclass(frozen=True)
class CaptureOptions:
    """Everything a capture needs besides the run directory."""

    schedule: Schedule = field(default_factory=Schedule)
    record_shapes: bool = True  # shapes feed the roofline (FLOPs and bytes per op)
    profile_memory: bool = True  # allocator events feed the memory analysis
    with_stack: bool = False  # the Python tracer costs a lot per call; opt in for source lines
    telemetry: bool = True
    telemetry_interval_s: float = 0.1
    step_marker: str | None = None  # "pkg.mod:func", "pkg.mod:Class.method" or an nn.Module class name
    auto_step: bool = True  # the global optimizer step hook
    memory: bool = False  # CUDA allocator history + memory_stats per step (capture/memory.py)

    def __post_init__(self) -> None:
        if not (0.005 <= self.telemetry_interval_s <= 60):
            raise AiprofError(
                f"telemetry interval must be between 0.005 and 60 seconds, got {self.telemetry_interval_s}"
            )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CaptureOptions:
        raw: dict[str, Any] = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        raw = {k: v for k, v in raw.items() if k in known}  # written by another aiprof version
        raw["schedule"] = Schedule(**raw.get("schedule", {}))
        return cls(**raw)
