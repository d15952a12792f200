#!/usr/bin/env bash
# `read_note` of an 800 KB note and of a 2 KB note over HTTP, p50 of 100 calls on one connection
# (curl), for each vaultgate binary given, alternating them twice so drift shows:
#
#   bash bench/large-read.sh OLD_BINARY NEW_BINARY
#
# The notes are generated deterministically (python3, seed 1): Markdown prose with quotes, links
# and headings, 819,222 bytes; and 2,010 bytes. Not part of `bench/run.sh`: the numbers are
# carried into BENCHMARKS.md by hand.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY…]" >&2; exit 2; }
work=$(mktemp -d)
trap 'pkill -f "serve --port 18801" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/vault" "$work/home"
python3 - "$work/vault" <<'PY'
import random, sys
random.seed(1)
words = ("the of and to in a is that for it as was with be by on not he this are or his from at which "
         "but have an they you were her she there been one all we their has would when if so no will more "
         "about can said into some could them than other then its only time").split()
lines, size = ["# Big note", ""], 0
while size < 800 * 1024:
    line = " ".join(random.choice(words) for _ in range(random.randint(8, 20)))
    if random.random() < 0.1:
        line = '- "' + line + '" [[Link]]'
    if random.random() < 0.05:
        line = "## " + line[:40]
    lines.append(line)
    size += len(line) + 1
open(sys.argv[1] + "/big.md", "w").write("\n".join(lines) + "\n")
open(sys.argv[1] + "/small.md", "w").write("# Small\n\n" + "word " * 400 + "\n")
PY
export HOME="$work/home"
"$1" init >/dev/null
"$1" vault add "$work/vault" --id big >/dev/null
tok=$("$1" token issue --name bench --tier read --format token | tail -n 1)
p50() { # path n
    local body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_note","arguments":{"path":"'$1'"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}'
    local args=() i
    for i in $(seq "$2"); do
        [ "$i" -gt 1 ] && args+=(--next)
        args+=(-s -o /dev/null -w '%{time_total}\n' -X POST -H "Authorization: Bearer $tok"
            -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'
            -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: read_note'
            --data "$body" http://127.0.0.1:18801/mcp)
    done
    # The first 10 warm the caches; the rest are timed.
    curl "${args[@]}" | tail -n +11 | sort -n | awk '{a[NR]=$1} END {printf "%.2f ms", a[int(NR/2)+1]*1000}'
}
for round in $(seq "${ROUNDS:-2}"); do
    for bin in "$@"; do
        "$bin" serve --port 18801 >"$work/serve.log" 2>&1 &
        for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18801/ 2>/dev/null && break; sleep 0.1; done
        printf 'round %s  %s  800 KB: p50 %s  2 KB: p50 %s\n' "$round" "$bin" "$(p50 big.md 110)" "$(p50 small.md 210)"
        kill %% 2>/dev/null || true
        wait 2>/dev/null || true
    done
done
