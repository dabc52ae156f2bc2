"""The tiny LightningModule and slow dataset the Lightning tests train (in-process and under torchrun)."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
import torch


class SlowPairs(torch.utils.data.Dataset):  # type: ignore[misc]
    """(x, y) regression pairs; each sample takes ``sleep_s`` to produce (a planted slow loader when > 0)."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randn(1, generator=g)


class Tiny(pl.LightningModule):  # type: ignore[misc]
    """A two-layer MLP; ``train``/``val``: the datasets its loaders read (batch size ``batch``)."""

    def __init__(self, train: Any, val: Any = None, batch: int = 2) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.train_data, self.val_data, self.batch = train, val, batch

    def training_step(self, batch: Any, i: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, i: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.train_data, batch_size=self.batch)

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.val_data or SlowPairs(0), batch_size=self.batch)
