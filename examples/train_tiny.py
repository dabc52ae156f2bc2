"""A tiny transformer language model trained on random tokens: a real training loop with a real
DataLoader, a few seconds on 2 CPU cores. Profile it with:

    aiprof run -- python examples/train_tiny.py
    aiprof analyze aiprof-runs/<the printed folder>

Under ``torchrun --nproc-per-node 2`` it trains with DistributedDataParallel (gloo on the CPU, NCCL on
GPUs). It runs the same on a GPU when one is present.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomTokens(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random token sequences; ``delay_ms`` imitates a slow decode or augmentation step."""

    def __init__(self, n: int, seq: int, vocab: int, delay_ms: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, seq + 1), generator=g)
        self.delay_s = delay_ms / 1000.0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        row = self.data[i]
        return row[:-1], row[1:]


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, batch_first=True, dropout=0.0)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.blocks(x, mask=mask, is_causal=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--data-delay-ms", type=float, default=0.0, help="per-sample delay in the Dataset")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if torch.cuda.is_available() else torch.device("cpu")
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(0)

    data = RandomTokens(args.steps * args.batch_size * max(1, int(os.environ.get("WORLD_SIZE", "1"))), args.seq, args.vocab, args.data_delay_ms)
    sampler = DistributedSampler(data, shuffle=False) if distributed else None
    loader = DataLoader(
        data,
        batch_size=args.batch_size,
        sampler=sampler,
        shuffle=False,
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0,
        drop_last=True,
    )
    model: nn.Module = TinyLM(args.vocab, args.dim, 4, args.layers, args.seq).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    t0 = time.perf_counter()
    while step < args.steps:
        for tokens, targets in loader:
            tokens, targets = tokens.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            logits = model(tokens)
            loss = loss_fn(logits.reshape(-1, args.vocab), targets.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
    rank = dist.get_rank() if distributed else 0
    if rank == 0:
        print(f"trained {step} steps in {time.perf_counter() - t0:.2f} s, last loss {loss.item():.3f}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
