"""Inference capture (capture/requests.py): generate() calls are requests with their tokens' arrival times,
the script's own streamer still sees every call, a call that cannot stream is left as the script made it,
and under `aiprof run` a generate() loop with no optimizer is profiled step by step (one forward a step)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import ROOT, run_aiprof, step_names

from aiprof.rundir import Request, format_requests, read_requests

GENERATE = ROOT / "examples" / "generate_tiny.py"


def test_requests_file_round_trip(tmp_path: Path) -> None:
    rows = [Request(0, 10, 50, 1, 32, (20, 30, 40)), Request(1, 60, 61, 2, 4, ())]
    path = tmp_path / "requests.rank0.csv"
    path.write_bytes(format_requests(rows) + b"garbage,line\n2,5,1,1,1,\nx,1,2,3,4,5\n")
    assert read_requests(path) == rows  # malformed lines and an end before the start are skipped
    (tmp_path / "other.csv").write_text("a,b\n")
    assert read_requests(tmp_path / "other.csv") is None and read_requests(tmp_path / "none.csv") is None


@pytest.fixture
def tiny_model(torch_available: None) -> Any:
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=100,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


class _Puts:
    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self.ended = 0

    def put(self, value: Any) -> None:
        self.shapes.append(tuple(value.shape))

    def end(self) -> None:
        self.ended += 1


def test_generate_is_a_request_with_its_tokens(tiny_model: Any) -> None:
    import torch
    from transformers.generation import utils

    from aiprof.capture.requests import RequestLog, patch_transformers

    prompt = torch.randint(1, 100, (1, 7))
    kwargs: dict[str, Any] = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=5, min_new_tokens=5,
                                  do_sample=False, pad_token_id=0)
    expected = tiny_model.generate(prompt, **kwargs)
    log, events = RequestLog(), []
    uninstall = patch_transformers(utils, log, lambda m: events.append(("start", m)), lambda: events.append(("end", None)))
    try:
        out = tiny_model.generate(prompt, **kwargs)  # no streamer: aiprof's own records the tokens
        theirs = _Puts()
        tiny_model.generate(prompt, streamer=theirs, **kwargs)  # the script's: wrapped, still called
        beams = tiny_model.generate(prompt, num_beams=2, **kwargs)  # beam search refuses streamers: none added
    finally:
        uninstall()
    assert utils.GenerationMixin.generate.__name__ == "generate" and not hasattr(utils.GenerationMixin.generate, "_aiprof_requests")
    assert torch.equal(out, expected) and beams.shape[1] == 12
    assert theirs.shapes == [(1, 7)] + [(1,)] * 5 and theirs.ended == 1
    assert [e for e, _ in events] == ["start", "end"] * 3 and events[0][1] is tiny_model
    first, second, third = log.requests
    for req in (first, second):
        assert (req.batch, req.prompt_tokens, len(req.token_unix_ns)) == (1, 7, 5)
        assert req.start_unix_ns < req.token_unix_ns[0] <= req.token_unix_ns[-1] <= req.end_unix_ns
        assert list(req.token_unix_ns) == sorted(req.token_unix_ns)
    assert third.token_unix_ns == () and third.end_unix_ns >= third.start_unix_ns
    assert [r.request for r in log.requests] == [0, 1, 2]


def test_aiprof_run_profiles_a_generate_loop(tmp_path: Path, torch_available: None) -> None:
    pytest.importorskip("transformers")
    out, stamps = tmp_path / "run", tmp_path / "stamps.jsonl"
    # request 0 (warm-up) is steps 0-7 (one forward each) and 8 (after it); requests 1-3 are steps 9-34.
    run = run_aiprof("run", "--out", str(out), "--wait", "8", "--warmup", "1", "--active", "26", "--no-telemetry",
                     "--no-summary", "--", "python", str(GENERATE), "--requests", "3", "--new-tokens", "8",
                     "--layers", "2", "--prompt", "16", "--stamps", str(stamps), timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "no steps detected" not in run.stderr
    names = step_names(out / "rank0.pt.trace.json.gz")
    assert sorted(int(n.split("#")[1]) for n in names) == list(range(9, 35))
    requests = read_requests(out / "requests.rank0.csv")
    assert requests is not None and len(requests) == 4
    script = [json.loads(line) for line in stamps.read_text().splitlines()]
    for ours, theirs in zip(requests, script):
        assert (ours.batch, ours.prompt_tokens, len(ours.token_unix_ns)) == (1, 16, 8)
        # the same events, seen by aiprof's tee just before the script's streamer, on the same thread: each of
        # our stamps comes before the script's stamp of that token and after its stamp of the previous one (an
        # order, not a bound in time: a loaded machine can pre-empt the thread between the two reads)
        theirs_ns = theirs["token_unix_ns"]
        assert all(a <= b for a, b in zip(ours.token_unix_ns, theirs_ns))
        assert all(b <= a for a, b in zip(ours.token_unix_ns[1:], theirs_ns))
        assert ours.start_unix_ns >= theirs["start_unix_ns"]

