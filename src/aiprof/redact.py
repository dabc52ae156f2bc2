"""Secrets out of command lines: what ``meta.json`` keeps and every report shows of the profiled command.

Command lines carry tokens in many shapes, and a run directory or a report travels (an issue, a PR, a
colleague). Three independent nets, each cheap:

- **by name**: the value of an option or assignment whose name says it is a secret (``--hf-token X``,
  ``--api-key=X``, ``wandb.api_key=X``, ``HF_TOKEN=X``, ``-p X``, ``Authorization: Bearer X``). A name is
  split into words (``-``, ``_``, ``.``, camelCase); it is secret when a word is one of :data:`SECRET_WORDS`
  or ends in one (``hftoken``, ``apikey``), unless its last word says it is *about* the secret rather than
  the secret (``--key-dim 64``, ``--token-budget``, ``--password-file``) or it is a boolean switch
  (``--no-auth``).
- **by shape**: known token formats anywhere in an argument (``sk-…``, ``hf_…``, ``AKIA…``, ``ghp_…``,
  ``github_pat_…``, ``xoxb-…``, ``glpat-…``, ``AIza…``, JSON Web Tokens…), and a whole value that is a long
  random-looking string (≥ 32 characters, letters and digits mixed, high entropy, not a path).
- **URL userinfo and query**: ``https://user:pw@host`` → ``https://user:***@host``; ``?token=X`` → ``?token=***``.

Ordinary arguments stay as they are: ``--lr 3e-4``, ``--batch-size 64``, ``--max-tokens 512``, paths.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

REDACTED = "<redacted>"
URL_MASK = "***"

# A name word that marks a secret (exact, or as the end of a fused word: "apikey", "hftoken").
SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "passphrase", "pass", "pwd", "pw", "auth",
    "authorization", "bearer", "cookie", "cookies", "credential", "credentials", "creds", "signature",
    "sig", "privatekey", "accesskey", "dsn", "jwt", "sas",
})
# Fused words ending in a secret word that are not secrets ("monkey", "bypass", "compass").
_NOT_FUSED = frozenset({"monkey", "hockey", "turkey", "donkey", "bypass", "compass", "surpass", "overpass", "trespass"})
# A last word that makes the option metadata about a secret, not the secret.
_ABOUT = frozenset({
    "dim", "dims", "size", "len", "length", "count", "num", "budget", "limit", "max", "min", "file", "files",
    "path", "paths", "dir", "name", "names", "id", "type", "field", "fields", "col", "column", "env", "var",
    "mode", "frames", "frame", "padding", "pad", "index", "idx", "ids", "map", "vocab", "fn", "func", "header",
    "format", "enabled", "disabled", "required", "rate", "ratio", "prob", "level", "layers", "heads",
})
# A first word that makes the option a switch taking no value (``--no-auth train.py``).
_SWITCH = frozenset({"no", "use", "enable", "disable", "with", "without", "skip", "require"})
# Short options that take a password in common tools (mysql, sshpass, curl's -u user:pw is a URL-like pair).
_SHORT_SECRET = frozenset({"-p", "-P"})

_KNOWN_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{16,}"  # OpenAI / Anthropic (checked for randomness below)
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_-]{35}|ya29\.[0-9A-Za-z_-]{20,}"  # Google
    r"|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,}"  # package registries
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JSON Web Token
    r")"
)
_RANDOM_RUN = re.compile(r"[A-Za-z0-9]{16,}")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/?#@\s]*):(?P<pw>[^@/?#\s]+)@")
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&#;\s]+)=(?P<value>[^&#;\s]*)")
_HEADER = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z0-9_-]*)\s*:\s*(?P<value>\S.*)$")
_ASSIGN = re.compile(r"^(?P<name>[+~]{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>.*)$", re.DOTALL)
_CANDIDATE = re.compile(r"^[A-Za-z0-9+_=-]{32,}$")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line with every secret value replaced (see the module doc); other arguments unchanged."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        text = str(arg)
        if hide_next:
            hide_next = False
            if not text.startswith("--"):
                out.append(REDACTED)
                continue
        if text in _SHORT_SECRET:
            out.append(text)
            hide_next = True
            continue
        option = text.startswith("-") and len(text) > 1 and not _is_number(text)
        if option and "=" not in text:
            out.append(text)
            hide_next = len(text) > 2 and is_secret_name(text.lstrip("-"), switch_ok=True)
            continue
        out.append(redact_text(text))
    return out


def redact_text(text: str) -> str:
    """One argument (or any free text) with its secrets replaced."""
    assign = _ASSIGN.match(text.lstrip("-")) if "=" in text else None
    if assign and is_secret_name(assign["name"].lstrip("+~")):
        return text[: len(text) - len(assign["value"])] + REDACTED
    header = _HEADER.match(text)
    if header and "://" not in text and is_secret_name(header["name"]):
        return text[: header.start("value")] + REDACTED
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{URL_MASK}@", text)
    if "://" in text:
        text = _QUERY_PARAM.sub(_query_param, text)
    text = _KNOWN_TOKEN.sub(_known_token, text)
    if assign and looks_random(assign["value"]):
        return text[: len(text) - len(assign["value"])] + REDACTED
    return REDACTED if looks_random(text) else text


def is_secret_name(name: str, *, switch_ok: bool = False) -> bool:
    """Whether an option / variable / key name says its value is a secret (see the module doc)."""
    words = _words(name)
    if not words or words[-1] in _ABOUT:
        return False
    if switch_ok and words[0] in _SWITCH:
        return False
    return any(_secret_word(w) for w in words)


def looks_random(value: str) -> bool:
    """A long token-like string: ≥ 32 characters of ``[A-Za-z0-9+_=-]`` (no path, no dot) with a run of ≥ 20
    letters and digits, at least 10 % digits, and ≥ 3.5 bits of entropy per character. Words, paths, run
    names and numbers are not."""
    if not _CANDIDATE.match(value) or max(map(len, _ALNUM_RUN.findall(value)), default=0) < 20:
        return False  # names built from words keep short runs between separators (run_lr3e-4_bs64_…)
    digits = sum(c.isdigit() for c in value)
    letters = sum(c.isalpha() for c in value)
    if digits < 0.1 * len(value) or letters < 0.2 * len(value):
        return False
    return _entropy(value) >= 3.5


def _secret_word(word: str) -> bool:
    if word in SECRET_WORDS:
        return True
    return word not in _NOT_FUSED and len(word) > 4 and any(word.endswith(s) for s in ("token", "secret", "password", "apikey", "passwd", "key"))  # noqa: E501


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name.strip().lstrip("-+~"))
    return [w.lower() for w in re.split(r"[\s_.\-:/\[\]]+", spaced) if w]


def _query_param(m: re.Match[str]) -> str:
    if m["value"] and is_secret_name(m["name"]):
        return f"{m['lead']}{m['name']}={URL_MASK}"
    return m.group(0)


def _known_token(m: re.Match[str]) -> str:
    token = m.group(0)
    if token.startswith("sk-"):
        # "sk-learn-classifier-v2" is a name: an OpenAI/Anthropic key holds a long random run.
        run = max(_RANDOM_RUN.findall(token[3:]), key=len, default="")
        if not (any(c.isdigit() for c in run) and any(c.isalpha() for c in run)):
            return token
    return REDACTED


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
