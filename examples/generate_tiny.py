"""Text generation with a tiny GPT-2 built from its config (no download): a warm-up request, then
``--requests`` requests of ``--new-tokens`` tokens each through ``model.generate()``, greedy, on the CPU
(``--device cuda``: on the GPU).
Profile it with:

    aiprof run -- python examples/generate_tiny.py
    aiprof analyze aiprof-runs/<the printed folder>

aiprof finds the decoding steps (each forward of the model) and the requests (each generate() call) by
itself. With ``--stamps FILE`` the script writes its own streamer's timestamps (unix ns: request start, each
token's ``put``) as JSON lines, to check aiprof's time to first token and inter-token latency against.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.generation.streamers import BaseStreamer


class StampStreamer(BaseStreamer):
    """Records when each new token reaches the host (the first ``put`` is the prompt)."""

    def __init__(self) -> None:
        self.prompt_seen = False
        self.token_ns: list[int] = []

    def put(self, value: torch.Tensor) -> None:
        now = time.time_ns()
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.token_ns.append(now)

    def end(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=32, help="prompt length in tokens")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128, help="hidden size (a multiple of the 4 heads)")
    parser.add_argument("--stamps", default=None, help="write the streamer's timestamps here (JSON lines)")
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu (default) or cuda")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=4, n_positions=256, vocab_size=1000,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval().to(args.device)
    prompt = torch.randint(0, config.vocab_size, (1, args.prompt)).to(args.device)
    mask = torch.ones_like(prompt)
    lines = []
    for i in range(args.requests + 1):  # request 0 warms up
        streamer = StampStreamer()
        start = time.time_ns()
        model.generate(prompt, attention_mask=mask, max_new_tokens=args.new_tokens,
                       min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0, streamer=streamer)
        lines.append(json.dumps({"request": i, "start_unix_ns": start, "token_unix_ns": streamer.token_ns}))
    if args.stamps:
        with open(args.stamps, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
