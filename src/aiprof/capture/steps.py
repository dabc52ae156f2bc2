"""Step detection without code changes.

* Training: a global optimizer step post-hook. The hook runs *inside* torch's
  ``Optimizer.step#...`` record_function, so the step boundary is not placed there (ProfilerStep
  spans would cross the optimizer span); it is marked pending and applied at the next clean point:
  the next batch request, ``zero_grad``, or the next module forward, whichever comes first.
  With several optimizers (GANs), only the first one that steps counts.
* Inference: ``--step-marker`` names an ``nn.Module`` class (a step ends when its outermost forward
  returns) or a function ``pkg.mod:func`` / ``pkg.mod:Class.method`` (a step ends when it returns).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from aiprof.errors import AiprofError

StepFn = Callable[[], None]


class PostImportHooks(importlib.abc.MetaPathFinder):
    """Run callbacks right after a module is first imported (to patch torch without importing it)."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._busy: set[str] = set()

    def when_imported(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        self.callbacks.setdefault(name, []).append(callback)
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.callbacks or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        callbacks = self.callbacks.pop(fullname)
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            for callback in callbacks:
                callback(module)

        try:
            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        except AttributeError:
            self.callbacks[fullname] = callbacks
            return None
        return spec


def install_optimizer_hook(on_step: Callable[[Any], None], on_zero_grad: StepFn) -> Callable[[], None]:
    """Register the global optimizer hook and the zero_grad patch; returns an uninstaller."""
    from torch.optim import optimizer as optim_mod

    handle = optim_mod.register_optimizer_step_post_hook(lambda opt, args, kwargs: on_step(opt))
    original = optim_mod.Optimizer.zero_grad

    @functools.wraps(original)
    def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        on_zero_grad()
        return original(self, *args, **kwargs)

    optim_mod.Optimizer.zero_grad = zero_grad  # type: ignore[method-assign]

    def uninstall() -> None:
        handle.remove()
        if optim_mod.Optimizer.zero_grad is zero_grad:
            optim_mod.Optimizer.zero_grad = original  # type: ignore[method-assign]

    return uninstall


class NextForward:
    """Call ``callback`` at the next module forward after :meth:`arm`, once (a global forward pre-hook).

    Armed after each optimizer step and disarmed at the next clean point, so it is set and cleared once per
    training step: it keeps one hook function and one slot in torch's global pre-hook dict (reserved through
    a ``RemovableHandle`` when made) and arming or disarming is a dict store or pop, as the handle's own
    ``remove()`` is, instead of a new closure and handle per step (~2 µs and four GC-tracked objects)."""

    def __init__(self, callback: StepFn) -> None:
        from torch.nn.modules import module as module_mod

        self._callback = callback
        self._hooks: dict[Any, Any] = module_mod._global_forward_pre_hooks
        handle = module_mod.register_module_forward_pre_hook(self._fire)
        self._key = handle.id
        self._hook = self._hooks[self._key]
        handle.remove()
        self.armed = False

    def arm(self) -> None:
        self._hooks[self._key] = self._hook
        self.armed = True

    def disarm(self) -> None:
        if self.armed:
            self._hooks.pop(self._key, None)
            self.armed = False

    def _fire(self, mod: Any, args: Any) -> None:
        self.disarm()
        self._callback()


class _Depth(threading.local):
    value = 0


def wrap_ending_step(fn: Callable[..., Any], on_step: StepFn) -> Callable[..., Any]:
    """``fn`` that ends a step each time its outermost call returns (recursion and nesting count once)."""
    depth = _Depth()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth.value += 1
        try:
            return fn(*args, **kwargs)
        finally:
            depth.value -= 1
            if depth.value == 0:
                on_step()

    wrapper._aiprof_marker = True  # type: ignore[attr-defined]
    return wrapper


def parse_marker(spec: str) -> tuple[str | None, str]:
    """``pkg.mod:qual.name`` → (module, qualname); a bare ``Name`` → (None, class name)."""
    spec = spec.strip()
    if ":" in spec:
        module, _, qualname = spec.partition(":")
        if not module or not qualname:
            raise AiprofError(f"--step-marker {spec!r}: expected MODULE:FUNCTION, MODULE:Class.method or a Module class name")
        return module, qualname
    if not spec.isidentifier():
        raise AiprofError(f"--step-marker {spec!r}: expected MODULE:FUNCTION, MODULE:Class.method or a Module class name")
    return None, spec


def patch_function(module: ModuleType, qualname: str, on_step: StepFn) -> None:
    """Replace ``module.<qualname>`` by a wrapper that ends a step after each outermost call."""
    owner: Any = module
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    target = getattr(owner, parts[-1])
    if getattr(target, "_aiprof_marker", False):
        return
    setattr(owner, parts[-1], wrap_ending_step(target, on_step))


def install_module_class_marker(class_name: str, on_step: StepFn) -> Callable[[], None]:
    """End a step after each outermost forward of the nn.Module class named ``class_name``.

    The class may live in the script itself, so it is found by name: a global forward hook watches
    until the first instance runs, then the class's ``forward`` is wrapped and the global hook (which
    slows every module call) is removed.
    """
    from torch.nn.modules import module as module_mod

    handle: Any = None

    def hook(mod: Any, args: Any, output: Any) -> None:
        cls = type(mod)
        if cls.__name__ != class_name and cls.__qualname__ != class_name:
            return
        remove()
        if not getattr(cls.forward, "_aiprof_marker", False):
            cls.forward = wrap_ending_step(cls.forward, on_step)
        on_step()  # this call, which the wrapper did not see

    def remove() -> None:
        nonlocal handle
        if handle is not None:
            handle.remove()
            handle = None

    handle = module_mod.register_module_forward_hook(hook)
    return remove


def resolve_now(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise AiprofError(f"--step-marker: cannot import {module_name} ({err})") from None


def hook_forward_begins(module: Any, on_begin: StepFn) -> Callable[[], None]:
    """Call ``on_begin`` before each forward of this module instance (a per-instance pre-hook: it sees the
    call even where accelerate or a wrapper replaced the instance's ``forward``); returns its remover."""
    handle = module.register_forward_pre_hook(lambda mod, args: on_begin())
    return handle.remove  # type: ignore[no-any-return]


def install_inference_detector(on_found: Callable[[Any], None], repeats: int = 2) -> Callable[[], None]:
    """Find the model of an inference loop without a marker: the module whose forward runs at the top level
    (inside no other module's forward) with gradients off, ``repeats`` times. ``on_found(module)`` is called
    once; the global hooks (which slow every module call) are removed then. Returns the remover.

    The detector stands down (removes its hooks) at the first top-level forward that begins with gradients
    on in a module with a parameter that requires them: that is a training loop, or inference without
    ``no_grad``, which it would never count (a parameterless module run with gradients on, such as an
    image transform before a no-grad model, is not). It does so in that forward's pre-hook, before the
    forward runs: for a ``torch.compile(model)`` the pre-hook runs eagerly in the compiled wrapper's call,
    before Dynamo traces the model, so the compiled code never has the hooks in it (Dynamo inlines global hooks and guards on them: compiled code pays for them on every
    call, and removing them after compilation recompiles every compiled frame once). Where the hook itself
    runs inside a region Dynamo is tracing (``model.compile()`` in place, a compiled function that calls
    the model), the hook set is left as it is, for the same reason."""
    import torch
    from torch.nn.modules import module as module_mod

    depth = _Depth()
    counts: dict[int, int] = {}
    handles: list[Any] = []
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def pre(mod: Any, args: Any) -> None:
        if not depth.value and torch.is_grad_enabled() and not compiling() and _has_trainable(mod):
            remove()  # a top-level forward that can train: not an inference loop
            return
        depth.value += 1

    def post(mod: Any, args: Any, output: Any) -> None:
        if not handles:
            return  # removed by this forward's pre-hook: its depth was not counted
        depth.value -= 1
        if depth.value or torch.is_grad_enabled():
            return
        key = id(mod)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] >= repeats:
            remove()
            on_found(mod)

    def remove() -> None:
        while handles:
            handles.pop().remove()

    handles.append(module_mod.register_module_forward_pre_hook(pre))
    handles.append(module_mod.register_module_forward_hook(post, always_call=True))
    return remove


def _has_trainable(module: Any) -> bool:
    """Whether the module (children included) has a parameter that requires a gradient."""
    try:
        return any(p.requires_grad for p in module.parameters())
    except Exception:  # noqa: BLE001 - a module whose parameters() fails is not ours to judge
        return False
