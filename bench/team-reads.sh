#!/usr/bin/env bash
# Team mode's read path and revocation, as BENCHMARKS.md "Team mode: reads and revocation" reports:
#
#   bash bench/team-reads.sh [BINARY]      # default: target/release/vaultgate
#
# Starts a private PostgreSQL cluster (Debian's server programs, as the `postgres` user when run as
# root; `fsync` and `synchronous_commit` at their defaults), a bare git remote with 1,000 notes
# (python3, seed 1), a team of three gateways (two serving over HTTP), then:
# - `read_note` with wrk (2026-07-28, 143 notes in turn, every answer checked) at 1, 8 and 32
#   connections on one gateway: each call authenticated against the team and its record committed;
# - revocation under load: four clients on the two serving gateways while the third revokes the
#   token; counts the requests sent after the revoke returned that were served (must be 0).
# Not part of `bench/run.sh`: the numbers are carried into BENCHMARKS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
vg=$(realpath "${1:-target/release/vaultgate}")
[ -x "$vg" ] || { echo "no binary at $vg (cargo build --release)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 2; }

work=$(mktemp -d)
chmod 755 "$work"  # the postgres user reaches its cluster inside
as_pg() { if [ "$(id -u)" = 0 ]; then setpriv --reuid postgres --regid postgres --init-groups -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pgport=$(free_port); p1=$(free_port); p2=$(free_port)
cleanup() {
    pkill -f "serve --port $p1" 2>/dev/null || true
    pkill -f "serve --port $p2" 2>/dev/null || true
    as_pg "$pgbin/pg_ctl" -D "$work/pg/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work/pg"
as_pg "$pgbin/initdb" -D "$work/pg/data" -A trust -U postgres -E UTF8 >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pg/data" -o "-p $pgport -k $work/pg -c listen_addresses=127.0.0.1" -l "$work/pg/log" -w start >/dev/null
db="postgres://postgres@127.0.0.1:$pgport/postgres"

python3 - "$work/person" "$work/read.lua" <<'PY'
import os, random, sys
random.seed(1)
person, script = sys.argv[1], sys.argv[2]
os.makedirs(person + "/notes")
words = "alpha beta gamma delta team vault note plan ship review agent search index remote commit".split()
for i in range(1000):
    with open(f"{person}/notes/n{i:04d}.md", "w") as f:
        f.write(f"---\ntitle: Note {i}\ntags: [t{i % 10}]\n---\n# Note {i}\n\n"
                + " ".join(random.choice(words) for _ in range(300)) + "\n")
meta = ('"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"1"},'
        '"io.modelcontextprotocol/clientCapabilities":{}}')
bodies = []
for i in range(0, 1000, 7):
    body = ('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_note",'
            f'"arguments":{{"path":"notes/n{i:04d}.md"}},{meta}}}}}')
    bodies.append('"' + body.replace('"', '\\"') + '"')
open(script, "w").write('''wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOK")
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "read_note"
local bodies = { %s }
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) i = math.random(#bodies); failed = 0 end
function request() i = i %% #bodies + 1; return wrk.format(nil, nil, nil, bodies[i]) end
function response(status, headers, body)
  if status ~= 200 or string.find(body, '"isError":true', 1, true) then failed = failed + 1 end
end
function done(summary, latency, requests)
  local f = 0
  for _, t in ipairs(threads) do f = f + t:get("failed") end
  io.write(string.format("failed=%%d p50=%%.2f p99=%%.2f\\n", f, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
''' % ",\n".join(bodies))
PY
git init -q -b main "$work/person"
git -C "$work/person" add -A
git -C "$work/person" -c user.name=Bench -c user.email=bench@example.com commit -qm notes
git init -q --bare -b main "$work/remote.git"
git -C "$work/person" push -q "$work/remote.git" main

export USER=bench
g() { local home=$1; shift; VAULTGATE_HOME="$work/$home" "$vg" "$@"; }
g g1 team init --database "$db" --name g1 >/dev/null
g g1 team secret export --out "$work/secret" >/dev/null
g g2 team join --database "$db" --secret-file "$work/secret" --name g2 >/dev/null
g g3 team join --database "$db" --secret-file "$work/secret" --name g3 >/dev/null
g g1 vault add --remote "$work/remote.git" --id notes >/dev/null
tok=$(g g1 token issue --name wrk --tier read --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
VAULTGATE_HOME="$work/g1" "$vg" serve --port "$p1" >"$work/serve1.log" 2>&1 &
VAULTGATE_HOME="$work/g2" "$vg" serve --port "$p2" >"$work/serve2.log" 2>&1 &
for p in "$p1" "$p2"; do
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/healthz" >/dev/null && break; sleep 0.1; done
done

echo "| connections | calls/s | p50 ms | p99 ms | failed |"
echo "|---|---|---|---|---|"
for c in 1 8 32; do
    t=$(( c < 2 ? 1 : 2 ))
    out=$(TOK="$tok" wrk -t"$t" -c"$c" -d10s -s "$work/read.lua" "http://127.0.0.1:$p1/mcp")
    rate=$(echo "$out" | awk '/Requests\/sec/ {printf "%d", $2}')
    line=$(echo "$out" | grep '^failed=')
    f=$(echo "$line" | sed 's/failed=\([0-9]*\).*/\1/')
    p50=$(echo "$line" | sed 's/.*p50=\([0-9.]*\).*/\1/')
    p99=$(echo "$line" | sed 's/.*p99=\([0-9.]*\).*/\1/')
    echo "| $c | $rate | $p50 | $p99 | $f |"
done

python3 - "$vg" "$work" "$p1" "$p2" <<'PY'
import http.client, json, os, subprocess, sys, threading, time
vg, work, p1, p2 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def cli(home, *args):
    return subprocess.run([vg, *args], env={**os.environ, "VAULTGATE_HOME": f"{work}/{home}"},
                          capture_output=True, check=True).stdout
token = json.loads(cli("g1", "token", "issue", "--name", "hammer", "--tier", "read", "--format", "json"))["token"]
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "h", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
    "name": "read_note", "arguments": {"path": "notes/n0001.md"}, "_meta": meta}})
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json",
           "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
           "Mcp-Method": "tools/call", "Mcp-Name": "read_note"}
log, lock, stop = [], threading.Lock(), threading.Event()
def hammer(port):
    conn = None
    while not stop.is_set():
        try:
            conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            t0 = time.monotonic()
            conn.request("POST", "/mcp", body, headers)
            r = conn.getresponse(); data = r.read()
            ok = r.status == 200 and b'"isError":false' in data
            with lock:
                log.append((t0, ok))
        except (OSError, http.client.HTTPException):
            conn = None  # the server closed it (a refused credential): open another
threads = [threading.Thread(target=hammer, args=(p,)) for p in (p1, p1, p2, p2)]
for t in threads:
    t.start()
time.sleep(2)
r0 = time.monotonic()
cli("g3", "token", "revoke", "hammer")
r1 = time.monotonic()
time.sleep(1.5)
stop.set()
for t in threads:
    t.join()
after = [ok for t0, ok in log if t0 > r1]
last_ok = max((t0 for t0, ok in log if ok), default=r0)
print(f"\nrevocation: {len(log)} requests; {len(after)} sent after the revoke returned, "
      f"{sum(after)} of them served; the revoke took {1000 * (r1 - r0):.0f} ms; the last request "
      f"served was sent {1000 * (last_ok - r0):+.0f} ms from its start")
PY
