#!/usr/bin/env bash
# The one command that reproduces BENCHMARKS.md:
#
#   bash bench/run.sh                      # sizes 1k, 10k, 100k (about 10 minutes on 2 cores)
#   bash bench/run.sh --sizes 1000,10000   # any harness option passes through (--help lists them)
#
# Builds vaultgate (the release code with line tables: the `profiling` profile) and the harness,
# installs the peers where they install (ripgrep from apt, the filesystem MCP server from npm, basic-memory from PyPI into a venv) and
# strace (apt, to count the sync calls of a write) and wrk (apt, the lean HTTP load generator),
# records each install that fails as "did not install: <reason>", then runs the harness, which
# writes BENCHMARKS.md and bench/out/results.json. Never fakes a peer: one that is missing is
# reported as missing.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=bench/out
PEERS=bench/.peers
mkdir -p "$OUT" "$PEERS"
STATUS="$OUT/peer-install.tsv"
: >"$STATUS"

note() { printf '[run.sh] %s\n' "$*" >&2; }
# fail NAME REASON: the harness reports the peer as "did not install: REASON".
fail() {
    printf '%s\t%s\n' "$1" "$2" >>"$STATUS"
    note "$1 did not install: $2"
}
# The last lines of an install log, on one line.
tail_of() { tail -n 4 "$1" | tr '\n\t' '  ' | sed 's/  */ /g' | cut -c1-300; }

note "building vaultgate (profile profiling) and vaultgate-bench (release)"
# `profiling` is the release build with line tables kept, so perf can name the code it samples;
# the release profile itself strips them (Cargo.toml). The code generated is the same.
cargo build --profile profiling -p vaultgate --bin vaultgate || exit 1
cargo build --release -p vaultgate-bench || exit 1
# Measure a snapshot of the binary, so a rebuild during the run cannot swap it underneath.
cp target/profiling/vaultgate "$OUT/vaultgate" || exit 1
BUILT="built by bench/run.sh from the working tree at commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo '?')"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    BUILT="$BUILT plus uncommitted changes"
fi

# apt_tool COMMAND PACKAGE: installs PACKAGE with apt when COMMAND is missing; a failure is
# recorded for the report under PACKAGE.
apt_tool() {
    command -v "$1" >/dev/null 2>&1 && return
    if ! command -v apt-get >/dev/null 2>&1; then
        fail "$2" "no $1 on PATH and no apt-get to install it"
        return
    fi
    note "installing $2 with apt-get"
    if ! { apt-get update -q && apt-get install -y -q "$2"; } >"$OUT/install-$2.log" 2>&1; then
        fail "$2" "apt-get install -y $2 failed: $(tail_of "$OUT/install-$2.log")"
    fi
}

# ripgrep, a peer; strace counts the sync calls of a write and wrk is the lean HTTP load generator
# the read targets are judged with (neither is a peer).
apt_tool rg ripgrep
apt_tool strace strace
apt_tool wrk wrk

# ---- the official filesystem MCP server (npm) ----
FS_JS="$PEERS/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
if [ ! -f "$FS_JS" ]; then
    if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
        note "installing @modelcontextprotocol/server-filesystem with npm"
        if ! npm install --prefix "$PEERS" --no-audit --no-fund @modelcontextprotocol/server-filesystem \
            >"$OUT/install-filesystem.log" 2>&1; then
            fail filesystem "npm install @modelcontextprotocol/server-filesystem failed: $(tail_of "$OUT/install-filesystem.log")"
        fi
    else
        fail filesystem "node and npm are not on PATH"
    fi
fi

# ---- basic-memory (PyPI, in a venv; it requires Python >= 3.12) ----
BM="$PEERS/bm-venv/bin/basic-memory"
if [ ! -x "$BM" ]; then
    PY=""
    candidates="python3.13 python3.12"
    if command -v pyenv >/dev/null 2>&1; then
        candidates="$candidates $(ls -d "$(pyenv root)"/versions/3.*/bin/python3 2>/dev/null | sort -rV | tr '\n' ' ')"
    fi
    candidates="$candidates python3"
    for c in $candidates; do
        if command -v "$c" >/dev/null 2>&1 &&
            "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            PY="$c"
            break
        fi
    done
    if [ -z "$PY" ]; then
        PY=python3
        note "no Python >= 3.12 found; trying $(python3 --version 2>&1) anyway"
    fi
    note "installing basic-memory with pip into $PEERS/bm-venv ($("$PY" --version 2>&1))"
    rm -rf "$PEERS/bm-venv"
    if ! { "$PY" -m venv "$PEERS/bm-venv" && "$PEERS/bm-venv/bin/pip" install -q basic-memory; } \
        >"$OUT/install-basic-memory.log" 2>&1; then
        fail basic-memory "pip install basic-memory failed with $("$PY" --version 2>&1): $(tail_of "$OUT/install-basic-memory.log")"
    fi
fi

note "running the harness"
exec target/release/vaultgate-bench \
    --vaultgate "$OUT/vaultgate" \
    --peers "$PEERS" \
    --out "$OUT" \
    --report BENCHMARKS.md \
    --profile \
    --binary-note "$BUILT" \
    --command "bash bench/run.sh${*:+ $*}" \
    "$@"
