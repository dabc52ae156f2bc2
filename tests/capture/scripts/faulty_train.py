"""A tiny training loop that ends badly on request: os._exit, a hang (for kill tests), SIGTERM ignored.

Prints ``READY pid=<pid>`` (and ``GRANDCHILD pid=<pid>`` with --grandchild) before it hangs.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--end", choices=["normal", "os_exit", "hang"], default="normal")
p.add_argument("--at", type=int, default=-1, help="step where --end happens; -1: after the loop; -2: before importing torch")
p.add_argument("--code", type=int, default=0, help="exit status for --end normal / os_exit")
p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (as a badly behaved script does)")
p.add_argument("--grandchild", action="store_true", help="start a sleeping subprocess before hanging")
args = p.parse_args()


def end() -> None:
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.end == "os_exit":
        os._exit(args.code)
    if args.end == "hang":
        if args.grandchild:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            print(f"GRANDCHILD pid={child.pid}", flush=True)
        print(f"READY pid={os.getpid()}", flush=True)
        for _ in range(1200):  # short sleeps: Python runs signal handlers when the main thread wakes
            time.sleep(0.1)
    sys.exit(args.code)


if args.at == -2:
    end()

import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    if step == args.at:
        end()
    loss = nn.functional.mse_loss(model(torch.randn(4, 16)), torch.randn(4, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"done {args.steps} steps pid={os.getpid()}", flush=True)
end()
