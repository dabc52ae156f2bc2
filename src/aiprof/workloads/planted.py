"""The planted workloads. Each ``_build_*`` returns a runner whose ``step()`` is one training step.

Sizes are chosen so that each planted problem costs tens of milliseconds per step on two CPU cores,
far above timing noise, and so that the fixed variant does the same useful work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from aiprof.workloads.base import Runner, Workload, register

LOAD_SLEEP_S = 0.00015  # per sample: 256 samples → ~50 ms of (I/O-like) waiting per batch
LOAD_BATCH = 256  # large enough that a batch's compute (~60 ms) dwarfs the ~1-2 ms of worker IPC per batch
BATCH = 64
CHAIN_SIZE = 2048
SYNC_BATCH = 4096
ATTENTION_SHAPE = (1, 4, 2048, 32)  # B, H, S, D: 64 MB of scores per call


class _Simple:
    """A runner from a step function and an optional close function."""

    def __init__(self, step: Callable[[], None], close: Callable[[], None] | None = None) -> None:
        self._step, self._close = step, close

    def step(self) -> None:
        self._step()

    def close(self) -> None:
        if self._close is not None:
            self._close()


def _mlp(torch: Any, device: str, width: int = 1024, depth: int = 3) -> tuple[Any, Any]:
    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=True)
    return model, opt


def _train_step(torch: Any, model: Any, opt: Any, x: Any, y: Any) -> Any:
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
    loss.mean().backward()
    opt.step()
    return loss


# ---------------------------------------------------------------------------------------------------
# data loading: a slow __getitem__ (I/O-like wait) with num_workers=0
# ---------------------------------------------------------------------------------------------------
class SlowDataset:
    """Each sample waits like a disk / network read (a sleep: no CPU used, so workers overlap it with
    training even on two cores), then returns its features."""

    def __init__(self, size: int = 100_000, features: int = 1024) -> None:
        import torch

        self.size = size
        self.table = torch.randn(256, features, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Any, int]:
        time.sleep(LOAD_SLEEP_S)
        return self.table[index % 256], index % 10


def _build_data_loading(fixed: bool, device: str) -> Runner:
    import torch

    torch.manual_seed(0)
    model, opt = _mlp(torch, device)
    gpu = device.startswith("cuda")
    dataset: Any = SlowDataset()
    loader: Any
    if fixed:
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=LOAD_BATCH, num_workers=4, pin_memory=gpu, persistent_workers=True,
            prefetch_factor=4, worker_init_fn=_one_thread,
        )
    else:
        loader = torch.utils.data.DataLoader(dataset, batch_size=LOAD_BATCH, num_workers=0)
    batches: Iterator[Any] = iter(loader)

    def step() -> None:
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        _train_step(torch, model, opt, x, y)

    def close() -> None:
        nonlocal batches
        del batches
        shutdown = getattr(loader, "_iterator", None)
        if shutdown is not None:
            shutdown._shutdown_workers()

    return _Simple(step, close)


def _one_thread(_: int) -> None:
    import torch

    torch.set_num_threads(1)


register(
    Workload(
        "data_loading",
        "data_loading",
        "MLP training; the Dataset waits ~0.2 ms per sample (like a slow disk) and DataLoader has num_workers=0",
        "DataLoader(num_workers=4, persistent_workers=True, prefetch_factor=4, pin_memory on GPU)",
        _build_data_loading,
    )
)


# ---------------------------------------------------------------------------------------------------
# host overhead: a Python loop over columns (thousands of tiny ops) instead of one vectorised op
# ---------------------------------------------------------------------------------------------------
def _build_host_overhead(fixed: bool, device: str) -> Runner:
    import torch

    torch.manual_seed(0)
    model, opt = _mlp(torch, device, width=1024, depth=2)
    x = torch.randn(BATCH, 1024, device=device)
    y = torch.randint(0, 10, (BATCH,), device=device)
    scale = torch.rand(1024, device=device) + 0.5
    shift = torch.randn(1024, device=device)

    def normalise_loop(t: Any) -> Any:
        out = t.clone()
        for j in range(t.shape[1]):  # the planted problem: a handful of tiny ops per column
            out[:, j].mul_(scale[j]).add_(shift[j]).clamp_(-3.0, 3.0)
        return out

    def normalise(t: Any) -> Any:
        return (t * scale + shift).clamp_(-3.0, 3.0)

    norm = normalise if fixed else normalise_loop

    def step() -> None:
        _train_step(torch, model, opt, norm(x), y)

    return _Simple(step)


register(
    Workload(
        "host_overhead",
        "host_bound",
        "MLP training whose input normalisation loops over 1,024 columns in Python (~6,000 tiny ops per step)",
        "the same normalisation as one vectorised expression ((t * scale + shift).clamp_(-3, 3))",
        _build_host_overhead,
    )
)


# ---------------------------------------------------------------------------------------------------
# float64 by mistake: model.double() and NumPy's float64 inputs
# ---------------------------------------------------------------------------------------------------
def _build_float64(fixed: bool, device: str) -> Runner:
    import numpy as np
    import torch

    torch.manual_seed(0)
    model, opt = _mlp(torch, device, width=512, depth=2)
    model = model.float() if fixed else model.double()
    batch = np.random.default_rng(0).standard_normal((BATCH, 512))  # float64: NumPy's default
    y = torch.randint(0, 10, (BATCH,), device=device)

    def step() -> None:
        x = torch.from_numpy(batch).to(device)
        _train_step(torch, model, opt, x.float() if fixed else x, y)

    return _Simple(step)


register(
    Workload(
        "float64",
        "precision",
        "MLP training in float64 by mistake (model.double(), a NumPy float64 batch): matrix work at half rate",
        "model.float() and torch.from_numpy(x).float()",
        _build_float64,
    )
)


# ---------------------------------------------------------------------------------------------------
# unfused attention: explicit matmul → softmax → matmul
# ---------------------------------------------------------------------------------------------------
def _build_attention(fixed: bool, device: str) -> Runner:
    import torch

    torch.manual_seed(0)
    b, h, s, d = ATTENTION_SHAPE
    qkv = torch.nn.Linear(d * h, 3 * d * h).to(device)
    out = torch.nn.Linear(d * h, d * h).to(device)
    x = torch.randn(b, s, d * h, device=device)

    def attention(q: Any, k: Any, v: Any) -> Any:
        if fixed:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        scores = torch.matmul(q, k.transpose(-2, -1)) / (d**0.5)
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    def step() -> None:
        with torch.no_grad():  # an inference / evaluation step
            q, k, v = qkv(x).view(b, s, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
            out(attention(q, k, v).transpose(1, 2).reshape(b, s, h * d)).sum()

    return _Simple(step)


register(
    Workload(
        "attention",
        "unfused_attention",
        "self-attention inference step (B=1, H=4, S=2048, D=32) written as matmul → softmax → matmul",
        "torch.nn.functional.scaled_dot_product_attention(q, k, v)",
        _build_attention,
    )
)


# ---------------------------------------------------------------------------------------------------
# unfused elementwise chain
# ---------------------------------------------------------------------------------------------------
def _chain(torch: Any, x: Any, w: Any) -> Any:
    y = x * w
    y = y + 0.5
    y = torch.relu(y)
    y = y * x
    y = y - 0.25
    y = torch.clamp(y, -1.0, 1.0)
    y = y * w
    return y + x


def _warm_compiled(torch: Any, fn: Callable[[Any, Any], Any], x: Any, w: Any, budget_s: float = 20.0) -> None:
    """Call the compiled chain until it runs the fused kernel: inductor may serve the first calls from
    eager code while its kernels compile in the background, and a measurement must not see those."""
    with torch.no_grad():
        start = time.perf_counter()
        _chain(torch, x, w)
        eager = time.perf_counter() - start
        deadline = time.perf_counter() + budget_s
        fast = 0
        while fast < 3 and time.perf_counter() < deadline:
            start = time.perf_counter()
            fn(x, w)
            fast = fast + 1 if time.perf_counter() - start < 0.6 * eager else 0


def _build_elementwise(fixed: bool, device: str) -> Runner:
    import torch

    torch.manual_seed(0)
    x = torch.randn(CHAIN_SIZE, CHAIN_SIZE, device=device)
    w = torch.randn(CHAIN_SIZE, CHAIN_SIZE, device=device)
    fn: Callable[[Any, Any], Any]
    if fixed:
        fn = torch.compile(lambda a, b: _chain(torch, a, b), dynamic=False)
        _warm_compiled(torch, fn, x, w)
    else:
        def fn(a: Any, b: Any) -> Any:
            return _chain(torch, a, b)

    def step() -> None:
        with torch.no_grad():
            fn(x, w).sum()

    return _Simple(step)


register(
    Workload(
        "elementwise",
        "fusion_opportunity",
        "an 8-op memory-bound elementwise chain (mul, add, relu, mul, sub, clamp, mul, add) over 2048×2048 tensors",
        "torch.compile on the chain (one fused kernel)",
        _build_elementwise,
    )
)


# ---------------------------------------------------------------------------------------------------
# per-step host round trips: .item() per sample
# ---------------------------------------------------------------------------------------------------
def _build_sync(fixed: bool, device: str) -> Runner:
    import torch

    torch.manual_seed(0)
    model, opt = _mlp(torch, device, width=128, depth=2)
    x = torch.randn(SYNC_BATCH, 128, device=device)
    y = torch.randint(0, 10, (SYNC_BATCH,), device=device)
    log: list[tuple[float, float]] = []

    def step() -> None:
        loss = _train_step(torch, model, opt, x, y).detach()
        conf = loss.neg().exp()  # per-sample confidence of the true class
        if fixed:
            log.extend(zip(loss.tolist(), conf.tolist()))  # one transfer per metric for the whole batch
        else:
            for i in range(loss.shape[0]):  # the planted problem: two round trips per sample
                log.append((loss[i].item(), conf[i].item()))
        del log[:-8192]

    return _Simple(step)


register(
    Workload(
        "sync",
        "sync",
        "MLP training that logs each sample's loss and confidence with .item() (8,192 host round trips per step)",
        "log the whole batch at once: log.extend(loss.tolist())",
        _build_sync,
    )
)


# ---------------------------------------------------------------------------------------------------
# clean baseline
# ---------------------------------------------------------------------------------------------------
def _build_clean(fixed: bool, device: str) -> Runner:
    import torch

    torch.manual_seed(0)
    model, opt = _mlp(torch, device, width=1024, depth=3)
    x = torch.randn(BATCH * 2, 1024, device=device)
    y = torch.randint(0, 10, (BATCH * 2,), device=device)
    total = torch.zeros((), device=device)

    def step() -> None:
        nonlocal total
        total = total + _train_step(torch, model, opt, x, y).detach().mean()

    return _Simple(step)


register(
    Workload(
        "clean",
        "",
        "a well-tuned MLP training step: data already in memory, no per-step host round trips",
        "nothing to fix",
        _build_clean,
    )
)


# ---------------------------------------------------------------------------------------------------
# CPU-bound loading: workers already on, but the transforms saturate the host's cores
# ---------------------------------------------------------------------------------------------------
class HeavyTransformDataset:
    """Each sample runs a CPU-heavy transform (like JPEG decoding + augmentation)."""

    def __init__(self, size: int = 100_000, features: int = 1024) -> None:
        import torch

        self.size = size
        self.base = torch.randn(192, 192, generator=torch.Generator().manual_seed(0))
        self.features = features

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import torch

        m = self.base + index
        for _ in range(3):
            m = torch.tanh(m @ self.base) * 0.1  # ~1 ms of CPU per sample
        return m.flatten()[: self.features].clone(), index % 10


def _build_cpu_loading(fixed: bool, device: str) -> Runner:
    import torch

    torch.manual_seed(0)
    model, opt = _mlp(torch, device, width=256, depth=2)
    dataset: Any = HeavyTransformDataset(features=256)
    loader: Any = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, num_workers=2, persistent_workers=True, prefetch_factor=2,
        worker_init_fn=_one_thread,
    )
    batches: Iterator[Any] = iter(loader)

    def step() -> None:
        x, y = next(batches)
        _train_step(torch, model, opt, x.to(device), y.to(device))

    def close() -> None:
        nonlocal batches
        del batches

    return _Simple(step, close)


register(
    Workload(
        "cpu_loading",
        "data_loading",
        "a small MLP fed by 2 DataLoader workers whose per-sample transform needs ~1 ms of CPU: the cores "
        "are saturated, more workers would not help",
        "no code fix: move the transform to the GPU or cache its output (cpu_saturation explains data_loading)",
        _build_cpu_loading,
    )
)
