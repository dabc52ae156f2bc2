"""Inference capture without code changes: requests and their tokens, and decoding steps.

* **Requests**: every outermost ``GenerationMixin.generate()`` call (Hugging Face Transformers, patched when
  ``transformers.generation.utils`` is imported) is a request. Its start and return are timed, and each new
  token's arrival on the host through a streamer: the script's own streamer wrapped in a tee (its
  ``put``/``end`` still run, in order), or, when the script passes none and the call can stream
  (greedy or sampling, ``num_beams`` 1, not continuous batching), a recording streamer. A call that cannot
  stream keeps its start and end only. Cost per token: one ``time.time_ns()`` and an append (the
  streamer protocol's ``tokens.cpu()`` is the host copy ``generate`` makes for its stop check anyway).
* **Weights**: the first ``generate()`` on a model records the bytes of its parameters and buffers per device
  (``models.rank<N>.json``: the inference memory budget's weights, which a CPU profiler's memory events cannot
  see when the model was built before profiling began). Once per model: one pass over its tensors.
* **Decoding steps**: the model a request runs on is a step marker: each outermost forward of its class
  begins a step (one forward = one prefill or decode step and its token selection), and the request's end
  closes the last one. Written to ``requests.rank<N>.csv`` (``aiprof.rundir``).

Imports neither torch nor transformers at import.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from aiprof.rundir import ModelWeights, Request

MAX_REQUESTS = 100_000
MAX_TOKENS_PER_REQUEST = 1_000_000
MAX_MODELS = 64


class _Open:
    """A request being served: its start, and what the streamer saw."""

    __slots__ = ("start_ns", "batch", "prompt", "tokens", "seen_prompt")

    def __init__(self) -> None:
        self.start_ns = time.time_ns()
        self.batch = 0
        self.prompt = 0
        self.tokens: list[int] = []
        self.seen_prompt = False

    def put(self, value: Any) -> None:
        """One ``streamer.put``: the prompt first (batch × prompt length), then new tokens."""
        now = time.time_ns()
        shape = tuple(getattr(value, "shape", ()))
        if not self.seen_prompt:
            self.seen_prompt = True
            self.batch = int(shape[0]) if shape else 1
            self.prompt = int(shape[-1]) if len(shape) >= 2 else (int(shape[0]) if shape else 0)
            return
        new = int(shape[-1]) if len(shape) >= 2 else 1  # assisted decoding puts several at once
        if len(self.tokens) + new <= MAX_TOKENS_PER_REQUEST:
            self.tokens.extend([now] * new)


class TeeStreamer:
    """A Transformers streamer that records token times, then hands each call to the script's own
    streamer (when there is one)."""

    def __init__(self, inner: Any, request: _Open) -> None:
        self._inner = inner
        self._request = request

    def put(self, value: Any) -> None:
        self._request.put(value)
        if self._inner is not None:
            self._inner.put(value)

    def end(self) -> None:
        if self._inner is not None:
            self._inner.end()

    def __getattr__(self, name: str) -> Any:  # anything else the script's streamer offers
        if self._inner is None:
            raise AttributeError(name)
        return getattr(self._inner, name)


def model_weights(model: Any) -> ModelWeights:
    """Bytes of ``model``'s parameters and buffers per device (``parameters()`` / ``buffers()`` yield each
    tensor once: tied weights count once)."""
    def per_device(tensors: Any) -> tuple[int, dict[str, int]]:
        count, out = 0, dict[str, int]()
        for t in tensors:
            count += 1
            device = str(t.device)
            out[device] = out.get(device, 0) + int(t.numel()) * int(t.element_size())
        return count, out

    count, params = per_device(model.parameters())
    _, buffers = per_device(model.buffers())
    return ModelWeights(type(model).__name__, count, params, buffers)


class RequestLog:
    """The requests of this process, bounded (``MAX_REQUESTS``), and the weights of the models they ran on."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.models: list[ModelWeights] = []
        self.dropped = 0
        self._lock = threading.Lock()
        self._model_ids: set[int] = set()

    def note_model(self, model: Any) -> None:
        """Record ``model``'s weights at its first request (:func:`model_weights`); never fails the call."""
        if id(model) in self._model_ids or len(self._model_ids) >= MAX_MODELS:
            return
        self._model_ids.add(id(model))
        try:
            weights = model_weights(model)
        except Exception:  # noqa: BLE001 - a model without parameters()/buffers(): nothing to record
            return
        with self._lock:
            self.models.append(weights)

    def begin(self) -> _Open:
        return _Open()

    def end(self, req: _Open) -> None:
        with self._lock:
            if len(self.requests) >= MAX_REQUESTS:
                self.dropped += 1
                return
            self.requests.append(Request(len(self.requests), req.start_ns, time.time_ns(), req.batch, req.prompt,
                                         tuple(req.tokens)))


class _Depth(threading.local):
    value = 0


def _num_beams(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if "num_beams" in kwargs:
        return int(kwargs["num_beams"] or 1)
    config = kwargs.get("generation_config", args[1] if len(args) > 1 else None)
    config = config if config is not None else getattr(model, "generation_config", None)
    return int(getattr(config, "num_beams", 1) or 1)


def _can_stream(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``generate`` accepts a streamer for this call (Transformers refuses one for beam search and
    continuous batching; a custom generate may not take one)."""
    if len(args) > 2 or "custom_generate" in kwargs or kwargs.get("cache_implementation") == "paged":
        return False
    return _num_beams(model, args, kwargs) == 1


def wrap_generate(original: Callable[..., Any], log: RequestLog, on_start: Callable[[Any], None],
                  on_end: Callable[[], None]) -> Callable[..., Any]:
    """``generate`` timed as a request (outermost calls only: assisted decoding nests one)."""
    depth = _Depth()
    state = {"inject": True}  # off after generate refused an injected streamer once

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if depth.value:
            return original(self, *args, **kwargs)
        depth.value += 1
        req = log.begin()
        try:
            log.note_model(self)
            on_start(self)
            theirs = kwargs.get("streamer")
            injected = theirs is None and state["inject"] and _can_stream(self, args, kwargs)
            if theirs is not None or injected:
                kwargs["streamer"] = TeeStreamer(theirs, req)
            try:
                return original(self, *args, **kwargs)
            except (ValueError, NotImplementedError) as err:
                if not injected or "stream" not in str(err):
                    raise
                state["inject"] = False  # refused before any forward ran: run it as the script asked
                del kwargs["streamer"]
                return original(self, *args, **kwargs)
        finally:
            depth.value -= 1
            log.end(req)
            on_end()

    generate._aiprof_requests = True  # type: ignore[attr-defined]
    return generate


def patch_transformers(module: Any, log: RequestLog, on_start: Callable[[Any], None],
                       on_end: Callable[[], None]) -> Callable[[], None]:
    """Wrap ``module.GenerationMixin.generate`` (``module``: ``transformers.generation.utils``); returns an
    uninstaller."""
    mixin = getattr(module, "GenerationMixin", None)
    original = getattr(mixin, "generate", None)
    if mixin is None or original is None or getattr(original, "_aiprof_requests", False):
        return lambda: None
    wrapped = wrap_generate(original, log, on_start, on_end)
    mixin.generate = wrapped

    def uninstall() -> None:
        if mixin.generate is wrapped:
            mixin.generate = original

    return uninstall
