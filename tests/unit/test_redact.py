"""Secrets out of command lines (:mod:`aiprof.redact`): a generated table of the forms a secret takes on a
command line, and ordinary arguments that must stay as they are."""

from __future__ import annotations

import itertools

import pytest

from aiprof.capture.meta import redact_command
from aiprof.redact import REDACTED, is_secret_name, looks_random, redact_argv, redact_text

SECRET = "s3cr3tValue"  # short and low-entropy on purpose: only the name can give it away
# Shapes that give themselves away without a name (fake tokens of the real formats).
TOKENS = [
    "sk-" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z",
    "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56",
    "sk-ant-api03-" + "Xy9Zz8Ww7Vv6Uu5Tt4Ss3Rr2Qq1Pp0Oo",
    "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "AKIA" + "IOSFODNN7EXAMPLE",
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github_pat_" + "11ABCDEFG0" + "a" * 30 + "_" + "b1" * 15,
    "xoxb-" + "123456789012-abcdefABCDEF",
    "glpat-" + "aB3dE5fG7hJ9kL1mN3pQ",
    "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "eyJhbGciOiJIUzI1NiJ9" + "." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0" + "." + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "9f86d081884c7d659a2f" + "eaa0c55ad015a3bf4f1b",  # a 40-hex API key (wandb's shape)
    "Zm9vYmFyYmF6cXV4MTIz" + "NDU2Nzg5MGFiY2RlZmdoaWprbG1u",  # base64 of random-ish bytes
]
NAMES = [
    "token", "hf-token", "hf_token", "HF_TOKEN", "api-key", "api_key", "apiKey", "apikey", "key", "secret",
    "client-secret", "password", "passwd", "pass", "pwd", "auth", "auth-token", "bearer", "cookie",
    "credentials", "wandb.api_key", "aws_secret_access_key", "private-key", "access-token", "db.password",
]


def _name_forms(name: str, value: str) -> list[tuple[list[str], list[str]]]:
    """(argv, expected) pairs: ``--name value``, ``--name=value``, ``-name value``, ``name=value``, ``+name=value``."""
    return [
        (["--" + name, value], ["--" + name, REDACTED]),
        (["--" + name + "=" + value], ["--" + name + "=" + REDACTED]),
        (["-" + name, value], ["-" + name, REDACTED]),
        ([name + "=" + value], [name + "=" + REDACTED]),
        (["+" + name + "=" + value], ["+" + name + "=" + REDACTED]),
    ]


NAME_CASES = [case for name in NAMES for case in _name_forms(name, SECRET)]
NAME_CASES += [case for name in ("Token", "API-KEY", "Password") for case in _name_forms(name, SECRET)]


@pytest.mark.parametrize(("argv", "expected"), NAME_CASES, ids=[" ".join(a) for a, _ in NAME_CASES])
def test_secret_by_name(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(["python", "train.py", *argv, "--lr", "3e-4"]) == ["python", "train.py", *expected, "--lr", "3e-4"]


SHAPE_CASES = list(itertools.product(TOKENS, ["{}", "--model={}", "--run-id", "run.tag={}"]))


@pytest.mark.parametrize(("token", "form"), SHAPE_CASES)
def test_secret_by_shape(token: str, form: str) -> None:
    argv = ["python", "train.py", form.format(token)] if "{}" in form else ["python", "train.py", form, token]
    out = redact_argv(argv)
    assert token not in " ".join(out), out
    assert REDACTED in out[-1] and out[:2] == ["python", "train.py"]


def test_known_token_inside_a_larger_argument() -> None:
    token = TOKENS[3]
    out = redact_text(f"https://huggingface.co/api?x=1&download={token}")
    assert token not in out and "huggingface.co" in out


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("https://user:hunter2@example.com/path", "https://user:***@example.com/path"),
        ("postgres://admin:p%40ss@db:5432/x", "postgres://admin:***@db:5432/x"),
        ("--db=mysql://root:pw@localhost/db", "--db=mysql://root:***@localhost/db"),
        ("s3://bucket/key?X-Amz-Signature=abc123&x=1", "s3://bucket/key?X-Amz-Signature=***&x=1"),
        ("https://host/p?access_token=abc&page=2", "https://host/p?access_token=***&page=2"),
        ("https://example.com/data.tar", "https://example.com/data.tar"),
        ("https://user@example.com/x", "https://user@example.com/x"),
    ],
)
def test_url_userinfo_and_query(arg: str, expected: str) -> None:
    assert redact_argv([arg]) == [expected]


def test_headers_and_short_password_options() -> None:
    assert redact_argv(["curl", "-H", "Authorization: Bearer abc.def", "-H", "Accept: json"]) == [
        "curl", "-H", f"Authorization: {REDACTED}", "-H", "Accept: json"]
    assert redact_argv(["mysql", "-p", "hunter2", "-h", "db"]) == ["mysql", "-p", REDACTED, "-h", "db"]
    assert redact_argv(["x", "--cookie", "sid=1"]) == ["x", "--cookie", REDACTED]
    # A secret option last on the line, or followed by another option, hides nothing else.
    assert redact_argv(["x", "--token"]) == ["x", "--token"]
    assert redact_argv(["x", "--auth", "--lr", "1"]) == ["x", "--auth", "--lr", "1"]


ORDINARY = [
    ["--lr", "3e-4"], ["--batch-size", "64"], ["--max-tokens", "512"], ["--num-tokens=100"], ["--key-dim", "64"],
    ["--token-budget", "4096"], ["--password-file", "/run/secrets/pw"], ["--no-auth", "train.py"],
    ["--passes", "3"], ["--keys", "a,b"], ["--tokenizer", "bert-base-uncased"], ["--monkey-patch"],
    ["--data", "/datasets/imagenet/train"], ["--out", "checkpoints/epoch_10_best_model_final.pt"],
    ["trainer.max_steps=1000"], ["model.tokenizer=gpt2"], ["--model", "sk-learn-classifier-v2-large"],
    ["--resume", "runs/2024-01-01_12-00-00/last.ckpt"], ["--seed", "-1"], ["-m", "torch.distributed.run"],
    ["--nproc-per-node", "8"], ["--config", "configs/llama_7b.yaml"], ["--device", "cuda:0"],
    ["--optimizer", "AdamW"], ["--warmup-steps=2000"], ["hf_hub_download_cache"], ["--key-file", "k.pem"],
    ["--run-name", "baseline_lr3e-4_bs64_seq2048_8xA100_bf16"],
]


@pytest.mark.parametrize("args", ORDINARY, ids=[" ".join(a) for a in ORDINARY])
def test_ordinary_arguments_are_kept(args: list[str]) -> None:
    argv = ["python", "train.py", *args]
    assert redact_argv(argv) == argv


def test_name_and_shape_predicates() -> None:
    assert is_secret_name("wandb.api_key") and is_secret_name("HF_TOKEN") and is_secret_name("clientSecret")
    assert not is_secret_name("max_tokens") and not is_secret_name("key_dim") and not is_secret_name("monkey")
    assert looks_random(TOKENS[-1]) and not looks_random("a" * 40) and not looks_random("checkpoint_epoch_10_final_best")


def test_meta_redact_command_is_the_same_redaction() -> None:
    argv = ["python", "t.py", "--hf-token", "abc", "--api-key=xyz", "wandb.api_key=k", TOKENS[0], "--lr", "3"]
    assert redact_command(argv) == redact_argv(argv)
    assert redact_command(argv) == ["python", "t.py", "--hf-token", REDACTED, f"--api-key={REDACTED}",
                                    f"wandb.api_key={REDACTED}", REDACTED, "--lr", "3"]
