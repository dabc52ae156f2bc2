#!/usr/bin/env bash
# Create the peer-tool venvs the speed/memory benchmark compares against (git-ignored: bench/.venv-*/).
#   bench/.venv-hta        holistictraceanalysis==0.5.0 (HTA; needs no torch)
#   bench/.venv-floor      msgspec + orjson + isal, for the decode floor (bench/floor.py)
#   bench/.venv-tracelens  AMD TraceLens, only if installable (see below)
# Every pip call goes through bench/peer-constraints.txt, which pins torch==2.13.0, so a peer can never
# pull a CUDA torch. Idempotent: a venv that finished installing has a .ok marker and is skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PY:-python3}"
cons="$here/peer-constraints.txt"

make_venv() {  # make_venv DIR: fresh venv with current pip
  "$py" -m venv "$1"
  "$1/bin/pip" install -q --upgrade pip
}

hta="$here/.venv-hta"
if [[ ! -f "$hta/.ok" ]]; then
  echo "setup_peers: creating $hta (holistictraceanalysis==0.5.0)"
  rm -rf "$hta"
  make_venv "$hta"
  # pandas 3 turns HTA 0.5.0's int16 -> int64 upcast (a warning in pandas 2) into a TypeError on
  # traces with > 32k correlation ids, so HTA runs with the pandas of its release time.
  "$hta/bin/pip" install -q -c "$cons" "holistictraceanalysis==0.5.0" "pandas==2.2.3"
  "$hta/bin/python" -c "import hta; from hta.trace_analysis import TraceAnalysis" \
    && touch "$hta/.ok"
fi

# The floor (bench/floor.py): the fastest JSON decoders, kept out of the project's own venv.
# isal: the fastest gzip inflate (aiprof uses it too), so that the floor stays a true lower bound.
fl="$here/.venv-floor"
if [[ ! -f "$fl/.ok-isal" ]]; then
  echo "setup_peers: creating $fl (msgspec, orjson, isal)"
  rm -rf "$fl"
  make_venv "$fl"
  "$fl/bin/pip" install -q -c "$cons" msgspec orjson isal
  "$fl/bin/python" -c "import msgspec, orjson, isal" && touch "$fl/.ok-isal"
fi

# AMD TraceLens (github.com/AMD-AGI/TraceLens) is installed from git only. The PyPI name "TraceLens"
# belongs to an unrelated project (an AI-agent evaluation framework), so `pip install TraceLens` would
# install the wrong tool. We install AMD's TraceLens only from a local checkout or wheel given in
# TRACELENS_SRC (a path pip can install); without it the TraceLens comparison is skipped.
tl="$here/.venv-tracelens"
if [[ -n "${TRACELENS_SRC:-}" && ! -f "$tl/.ok" ]]; then
  echo "setup_peers: creating $tl from $TRACELENS_SRC"
  rm -rf "$tl"
  make_venv "$tl"
  "$tl/bin/pip" install -q -c "$cons" "$TRACELENS_SRC"
  "$tl/bin/python" -c "from TraceLens import TreePerfAnalyzer" && touch "$tl/.ok"
elif [[ ! -f "$tl/.ok" ]]; then
  echo "setup_peers: TRACELENS_SRC not set; AMD TraceLens is not on PyPI, skipping its venv"
fi
