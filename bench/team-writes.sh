#!/usr/bin/env bash
# Team mode's write path, as BENCHMARKS.md "Team mode: propose and apply" reports:
#
#   bash bench/team-writes.sh [BINARY] [PAIRS] [CLIENTS]   # default: target/release/vaultgate, 200, 1
#
# Starts a private PostgreSQL cluster (Debian's server programs, as the `postgres` user when run as
# root; `fsync` and `synchronous_commit` at their defaults), a bare git remote on this disk with
# 1,000 notes (python3, seed 1) and a team of two gateways (g1 serving over HTTP), then one client
# makes PAIRS sequential propose_new_note + apply_proposal pairs (2026-07-28, every answer checked):
# each proposal stored with its record, each apply checked against the remote's head, committed,
# pushed by compare-and-swap and recorded. Beside it, the push alone: PAIRS `git push`es of a
# one-note commit from a plain clone to the same remote. Prints p50 and p99 of each.
# With CLIENTS > 1, three gateways serve and CLIENTS clients (client i through gateway i mod 3)
# make PAIRS pairs between them at once, closed loops on one vault: pairs/s, p50 and p99.
# Not part of `bench/run.sh`: the numbers are carried into BENCHMARKS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
vg=$(realpath "${1:-target/release/vaultgate}")
pairs=${2:-200}
clients=${3:-1}
[ -x "$vg" ] || { echo "no binary at $vg (cargo build --release)" >&2; exit 2; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 2; }

work=$(mktemp -d)
chmod 755 "$work"  # the postgres user reaches its cluster inside
as_pg() { if [ "$(id -u)" = 0 ]; then setpriv --reuid postgres --regid postgres --init-groups -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pgport=$(free_port); p1=$(free_port); p2=$(free_port); p3=$(free_port)
cleanup() {
    pkill -f "serve --port $p1" 2>/dev/null || true
    pkill -f "serve --port $p2" 2>/dev/null || true
    pkill -f "serve --port $p3" 2>/dev/null || true
    as_pg "$pgbin/pg_ctl" -D "$work/pg/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work/pg"
as_pg "$pgbin/initdb" -D "$work/pg/data" -A trust -U postgres -E UTF8 >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pg/data" -o "-p $pgport -k $work/pg -c listen_addresses=127.0.0.1" -l "$work/pg/log" -w start >/dev/null
db="postgres://postgres@127.0.0.1:$pgport/postgres"

python3 - "$work/person" <<'PY'
import os, random, sys
random.seed(1)
person = sys.argv[1]
os.makedirs(person + "/notes")
words = "alpha beta gamma delta team vault note plan ship review agent search index remote commit".split()
for i in range(1000):
    with open(f"{person}/notes/n{i:04d}.md", "w") as f:
        f.write(f"---\ntitle: Note {i}\n---\n# Note {i}\n\n" + " ".join(random.choice(words) for _ in range(300)) + "\n")
PY
git init -q -b main "$work/person"
git -C "$work/person" add -A
git -C "$work/person" -c user.name=Bench -c user.email=bench@example.com commit -qm notes
git init -q --bare -b main "$work/remote.git"
git -C "$work/remote.git" config receive.denyNonFastForwards true
git -C "$work/remote.git" config core.logAllRefUpdates always
git -C "$work/person" push -q "$work/remote.git" main

export USER=bench
g() { local home=$1; shift; VAULTGATE_HOME="$work/$home" "$vg" "$@"; }
g g1 team init --database "$db" --name g1 >/dev/null
g g1 team secret export --out "$work/secret" >/dev/null
g g2 team join --database "$db" --secret-file "$work/secret" --name g2 >/dev/null
g g3 team join --database "$db" --secret-file "$work/secret" --name g3 >/dev/null
g g1 vault add --remote "$work/remote.git" --id notes >/dev/null
tok=$(g g1 token issue --name bench --tier full --yes --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
VAULTGATE_HOME="$work/g1" "$vg" serve --port "$p1" >"$work/serve1.log" 2>&1 &
if [ "$clients" -gt 1 ]; then
    VAULTGATE_HOME="$work/g2" "$vg" serve --port "$p2" >"$work/serve2.log" 2>&1 &
    VAULTGATE_HOME="$work/g3" "$vg" serve --port "$p3" >"$work/serve3.log" 2>&1 &
fi
for p in "$p1" "$p2" "$p3"; do
    [ "$clients" -gt 1 ] || [ "$p" = "$p1" ] || continue
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/healthz" >/dev/null && break; sleep 0.1; done
done
if [ "$clients" -gt 1 ]; then
python3 - "$tok" "$pairs" "$clients" "$work" "$p1" "$p2" "$p3" <<'PY'
import http.client, json, subprocess, sys, threading, time
token, pairs, clients, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ports = [int(p) for p in sys.argv[5:8]]
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
def call(conn, name, args):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": args, "_meta": meta}})
    conn.request("POST", "/mcp", body, {
        "Authorization": "Bearer " + token, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call", "Mcp-Name": name})
    r = conn.getresponse(); data = r.read().decode()
    if data.startswith("event:") or data.startswith("data:"):
        data = next(l[5:] for l in data.splitlines() if l.startswith("data:"))
    reply = json.loads(data).get("result") or {}
    return r.status == 200 and not reply.get("isError"), reply.get("structuredContent"), data
lock, done, pair, busy = threading.Lock(), [0], [], [0]
def client(c):
    conn = http.client.HTTPConnection("127.0.0.1", ports[c % 3], timeout=120)
    while True:
        with lock:
            if done[0] >= pairs:
                return
            i = done[0]; done[0] += 1
        t0 = time.monotonic()
        ok, p, data = call(conn, "propose_new_note", {"path": f"bench/c{c}-{i:05d}.md", "content": f"# B {i}\n\nbench\n", "reason": "bench"})
        if not ok:
            raise SystemExit(f"propose failed: {data[:300]}")
        while True:
            ok, a, data = call(conn, "apply_proposal", {"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": f"k{c}-{i}"})
            if ok:
                break
            if "VAULT_BUSY" not in data:
                raise SystemExit(f"apply failed: {data[:300]}")
            with lock:
                busy[0] += 1
        assert a["applied"] and a["git"] == "committed", a
        with lock:
            pair.append(time.monotonic() - t0)
start = time.monotonic()
threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
total = time.monotonic() - start
xs = sorted(pair)
pct = lambda q: 1000 * xs[min(len(xs) - 1, int(q * len(xs)))]
heads = subprocess.run(["git", "-C", f"{work}/remote.git", "rev-list", "--count", "main"], capture_output=True, text=True).stdout.strip()
pushes = len(subprocess.run(["git", "-C", f"{work}/remote.git", "reflog", "show", "main"], capture_output=True, text=True).stdout.splitlines()) - 1
print(f"{len(xs)} pairs from {clients} clients over 3 gateways in {total:.1f} s: {len(xs) / total:.1f} pairs/s, "
      f"pair p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms; {busy[0]} VAULT_BUSY retries; the remote has {heads} commits, "
      f"pushed in {pushes} pushes")
PY
exit 0
fi

python3 - "$p1" "$tok" "$pairs" "$work" <<'PY'
import http.client, json, subprocess, sys, time
port, token, pairs, work = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
def call(name, args):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": args, "_meta": meta}})
    conn.request("POST", "/mcp", body, {
        "Authorization": "Bearer " + token, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call", "Mcp-Name": name})
    r = conn.getresponse(); data = r.read().decode()
    if data.startswith("event:") or data.startswith("data:"):
        data = next(l[5:] for l in data.splitlines() if l.startswith("data:"))
    reply = json.loads(data)["result"]
    if r.status != 200 or reply.get("isError"):
        raise SystemExit(f"{name} failed: {data[:400]}")
    return reply["structuredContent"]
def pct(xs, q):
    xs = sorted(xs); return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))]
prop, app, pair = [], [], []
start = time.monotonic()
for i in range(pairs):
    t0 = time.monotonic()
    p = call("propose_new_note", {"path": f"bench/b{i:05d}.md", "content": f"# B {i}\n\nbench\n", "reason": "bench"})
    t1 = time.monotonic()
    a = call("apply_proposal", {"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": f"k{i}"})
    t2 = time.monotonic()
    assert a["applied"] and a["git"] == "committed" and a["commit"], a
    prop.append(t1 - t0); app.append(t2 - t1); pair.append(t2 - t0)
total = time.monotonic() - start
heads = subprocess.run(["git", "-C", f"{work}/remote.git", "rev-list", "--count", "main"], capture_output=True, text=True).stdout.strip()
print(f"{pairs} pairs in {total:.1f} s: {pairs / total:.1f} pairs/s; the remote has {heads} commits")
print("| step | p50 ms | p99 ms |")
print("|---|---|---|")
for name, xs in (("propose_new_note", prop), ("apply_proposal (fetch, check, commit, push, record)", app), ("pair", pair)):
    print(f"| {name} | {pct(xs, 0.5):.1f} | {pct(xs, 0.99):.1f} |")
# The push alone: a plain clone pushing a one-note commit to the same remote.
plain = f"{work}/plain"
subprocess.run(["git", "clone", "-q", f"{work}/remote.git", plain], check=True)
env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x", "PATH": "/usr/bin:/bin"}
push = []
for i in range(pairs):
    with open(f"{plain}/p{i:05d}.md", "w") as f:
        f.write(f"# P {i}\n")
    subprocess.run(["git", "-C", plain, "add", f"p{i:05d}.md"], check=True, env=env)
    subprocess.run(["git", "-C", plain, "commit", "-qm", "p"], check=True, env=env)
    t0 = time.monotonic()
    subprocess.run(["git", "-C", plain, "push", "-q", "origin", "main"], check=True, env=env)
    push.append(time.monotonic() - t0)
print(f"| git push alone (one-note commit, same remote) | {pct(push, 0.5):.1f} | {pct(push, 0.99):.1f} |")
PY
