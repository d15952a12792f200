#!/usr/bin/env bash
# Team mode's failover, as BENCHMARKS.md "Team mode: failover" reports:
#
#   bash bench/team-failover.sh [BINARY] [ROUNDS] [LEASE_SECONDS]
#                               # default: target/release/vaultgate, 8, the default lease (10 s)
#
# Starts a private PostgreSQL cluster (as bench/team-writes.sh does), a bare git remote with 1,000
# notes whose `pre-receive` hook holds every push while a flag file exists, and a team of two
# gateways serving over HTTP. Each round: a proposal made through g2; its apply sent to g1, whose
# push the hook holds (g1 holds the vault's lease, renewing it); g1 killed with SIGKILL; the hook
# let go (the push g1 started lands after it died); the caller retries with its key through g2
# until it answers applied. Failover: from the kill to that answer. Checks each round that the
# proposal's commit is on the remote exactly once. Prints p50 and max.
# Not part of `bench/run.sh`: the numbers are carried into BENCHMARKS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
vg=$(realpath "${1:-target/release/vaultgate}")
rounds=${2:-8}
lease=${3:-default}
[ -x "$vg" ] || { echo "no binary at $vg (cargo build --release)" >&2; exit 2; }
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
git -C "$work/person" push -q "$work/remote.git" main

export USER=bench
g() { local home=$1; shift; VAULTGATE_HOME="$work/$home" "$vg" "$@"; }
printf '#!/bin/sh\ntouch "%s/started"\nwhile [ -e "%s/hold" ]; do sleep 0.05; done\n' "$work" "$work" >"$work/remote.git/hooks/pre-receive"
chmod 755 "$work/remote.git/hooks/pre-receive"
g g1 team init --database "$db" --name g1 >/dev/null
g g1 team secret export --out "$work/secret" >/dev/null
g g2 team join --database "$db" --secret-file "$work/secret" --name g2 >/dev/null
g g1 vault add --remote "$work/remote.git" --id notes >/dev/null
g g1 team set lease_seconds "$lease" >/dev/null
tok=$(g g1 token issue --name bench --tier full --yes --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')

python3 - "$vg" "$work" "$p1" "$p2" "$tok" "$rounds" <<'PY'
import http.client, json, os, signal, subprocess, sys, threading, time
vg, work, p1, p2, token, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
def serve(home, port):
    log = open(f"{work}/serve-{home}.log", "a")
    proc = subprocess.Popen([vg, "serve", "--port", str(port)], env={**os.environ, "VAULTGATE_HOME": f"{work}/{home}"},
                            stdout=log, stderr=log)
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1); c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{home} did not start")
def call(port, name, args, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": args, "_meta": meta}})
    conn.request("POST", "/mcp", body, {
        "Authorization": "Bearer " + token, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call", "Mcp-Name": name})
    r = conn.getresponse(); data = r.read().decode()
    if data.startswith("event:") or data.startswith("data:"):
        data = next(l[5:] for l in data.splitlines() if l.startswith("data:"))
    return r.status, json.loads(data)
def git(*args):
    return subprocess.run(["git", "-C", f"{work}/remote.git", *args], capture_output=True, text=True, check=True).stdout
g1, g2 = serve("g1", p1), serve("g2", p2)
times = []
for i in range(rounds):
    _, reply = call(p2, "propose_new_note", {"path": f"failover/f{i:03d}.md", "content": f"# F {i}\n", "reason": "failover"})
    p = reply["result"]["structuredContent"]
    args = {"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": f"k{i}"}
    open(f"{work}/hold", "w").close()
    if os.path.exists(f"{work}/started"):
        os.remove(f"{work}/started")
    def lose():
        try:
            call(p1, "apply_proposal", args)
        except (OSError, http.client.HTTPException):
            pass
    lost = threading.Thread(target=lose, daemon=True); lost.start()
    while not os.path.exists(f"{work}/started"):
        time.sleep(0.01)
    time.sleep(0.5)  # mid-push, the lease renewed at least once meanwhile
    g1.send_signal(signal.SIGKILL); g1.wait()
    t0 = time.monotonic()
    os.remove(f"{work}/hold")  # the push g1 started lands now, after its death
    while True:
        status, reply = call(p2, "apply_proposal", args)
        out = reply.get("result", {})
        if status == 200 and not out.get("isError"):
            break
        text = json.dumps(reply)
        if "VAULT_BUSY" not in text:
            raise SystemExit(f"round {i}: {text[:400]}")
    t1 = time.monotonic()
    a = out["structuredContent"]
    assert a["applied"] and a["git"] == "committed", a
    landed = git("log", "--format=%H", f"--grep=Vaultgate-Proposal: {p['id']}", "main").split()
    assert landed == [a["commit"]], (landed, a)
    times.append(t1 - t0)
    print(f"round {i}: failover {1000 * (t1 - t0):.0f} ms", flush=True)
    g1 = serve("g1", p1)
times.sort()
print(f"failover over {rounds} rounds: p50 {1000 * times[len(times) // 2]:.0f} ms, max {1000 * times[-1]:.0f} ms")
g1.kill(); g2.kill()
PY
