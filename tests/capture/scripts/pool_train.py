"""A profiled loop in the main process beside a ``multiprocessing.Pool(2)`` of helpers that import torch
and read a DataLoader but never train: the helpers are not ranks, and tearing the pool down is not a failure.

usage: pool_train.py {fork,spawn} {close,terminate}
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def helper(x: int) -> int:
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    return x * x + int(sum(float(batch[0].sum()) for batch in loader) * 0)


def main(context: str, teardown: str) -> None:
    torch.set_num_threads(1)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pool = mp.get_context(context).Pool(2)
    for _ in range(6):
        assert pool.map(helper, range(4)) == [0, 1, 4, 9]
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if teardown == "close":
        pool.close()
    else:
        pool.terminate()
    pool.join()
    print(f"done pid={os.getpid()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
