#!/usr/bin/env python3
"""Take the review page's screenshots for the docs: docs/review-inbox.png and docs/review-proposal.png.

This is not a test: it checks nothing about the page beyond what it needs to find its way, and
nothing runs it automatically. Run it by hand after changing how the review page looks, look at
the two PNGs, and commit them:

    python3 scripts/screenshots.py                      # target/release/vaultgate, else target/debug
    python3 scripts/screenshots.py --bin path/to/vaultgate --out /tmp/shots --scale 2

What it does, all in a temporary folder it removes afterwards (also on error or Ctrl-C):

1. copies the fixture vault tests/fixtures/vaults/basic, makes a home (`vaultgate init`,
   `vault add`) and issues a `propose` credential for an agent called claude-desktop;
2. starts `vaultgate serve` on a free loopback port;
3. plays the agent over `vaultgate stdio` (MCP JSON-RPC, one message a line): reads notes and
   makes four proposals (two patches, a new note, a move);
4. starts chromedriver on a free port and drives headless Chromium over plain WebDriver HTTP,
   opens the one-time link from `vaultgate review`, saves the Inbox, then opens the patch to
   z/attention.md and saves its whole page (the window is sized to the page, so the diff and
   the Apply/Reject forms are in the picture).

--scale 2 gives crisper pictures, but the proposal page then weighs about 500 KB, so the
committed ones are --scale 1 (1280 px wide). Needs Python 3.9+ (standard library only), and
chromium and chromedriver on PATH (or --chromium / --chromedriver). Chromium runs with
--no-sandbox, so it also works as root. Prints the files it wrote; exits non-zero on any
failure, with the tail of the server's log.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "vaults" / "basic"
VAULT_ID = "notes"
VAULT_NAME = "Research notes"
AGENT = "claude-desktop"
WIDTH = 1280
HEIGHT = 900
# The WebDriver element reference key (W3C).
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class Failure(Exception):
    pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], **kw) -> str:
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, **kw)
    if p.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def wait_http(url: str, proc: subprocess.Popen, what: str, timeout: float = 20.0) -> None:
    """Wait until `url` answers at all (any HTTP status counts), or fail if `proc` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Failure(f"{what} exited with {proc.returncode} before it answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise Failure(f"{what} did not answer at {url} within {timeout:.0f} s")


# ---------------------------------------------------------------- the agent: MCP over stdio


class Agent:
    """A minimal MCP client over `vaultgate stdio`: one JSON-RPC message per line."""

    def __init__(self, exe: str, home: Path, token: str):
        env = dict(os.environ, VAULTGATE_TOKEN=token)
        self.proc = subprocess.Popen(
            [exe, "--home", str(home), "stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            encoding="utf-8",
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.next_id = 1
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "screens", "version": "1"},
            },
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        rid = self.next_id
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + 30
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise Failure(f"no answer to {method} within 30 s") from None
            if line is None:
                raise Failure(f"vaultgate stdio exited ({self.proc.poll()}) during {method}")
            msg = json.loads(line)
            if msg.get("id") != rid:
                continue  # a notification
            if "error" in msg:
                raise Failure(f"{method}: {msg['error']}")
            return msg["result"]

    def call(self, tool: str, **arguments) -> dict:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            text = " ".join(c.get("text", "") for c in result.get("content", []))
            raise Failure(f"{tool} refused: {text}")
        return result["structuredContent"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def make_proposals(agent: Agent) -> None:
    """What an agent might plausibly propose for the fixture vault; the last one is newest."""
    today = time.strftime("%Y-%m-%d")
    note = agent.call("read_note", path="z/transformer.md")
    agent.call(
        "propose_note_patch",
        path="z/transformer.md",
        baseHash=note["hash"],
        edits=[{"oldText": "\nFiled under #architecture for now\n", "newText": "\n"}],
        reason="docs/tags.md has no architecture tag, and the note is already tagged ml and "
        "transformer in its frontmatter, so the leftover inline tag can go.",
    )

    agent.call(
        "propose_move",
        **{"from": "notes/cooking.md"},
        to="food/tomato-egg-stir-fry.md",
        reason="\"Cooking\" holds a single recipe. Naming the file after the dish and starting a "
        "food/ folder for the next ones; the link in notes/untitled.md gets rewritten.",
    )

    agent.call(
        "propose_new_note",
        path="z/layer-norm.md",
        content="---\n"
        "title: Layer normalization\n"
        "description: Rescales each token's activations to zero mean and unit variance.\n"
        "tags: [ml, transformer]\n"
        f"created: {today}\n"
        "---\n"
        "# Layer normalization\n"
        "\n"
        "Layer normalization rescales every token's vector on its own, which keeps deep stacks\n"
        "trainable.\n"
        "\n"
        "For a vector x of d features: y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta,\n"
        "with gamma and beta learned per feature.\n"
        "\n"
        "Each block of the [[transformer]] applies it around the [[attention]] and feed-forward\n"
        "sublayers, next to the residual connection.\n",
        reason="The transformer note mentions layer normalization but nothing in the vault "
        "explains it. A short note in the house style; I left it out of the ML map for now.",
    )

    note = agent.call("read_note", path="z/attention.md")
    agent.call(
        "propose_note_patch",
        path="z/attention.md",
        baseHash=note["hash"],
        edits=[
            {"oldText": "updated: 2026-01-04", "newText": f"updated: {today}"},
            {
                "oldText": "Scores are the dot products of queries and keys, divided by sqrt(d_k),\n"
                "then normalized with [[softmax]] and used to average the values.\n",
                "newText": "Scores are the dot products of queries and keys, divided by sqrt(d_k)\n"
                "so that long vectors do not push the softmax into saturation, then\n"
                "normalized with [[softmax]] and used as weights to average the values:\n"
                "\n"
                "    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V\n",
            },
        ],
        reason="Says why the scores are divided by sqrt(d_k) and adds the formula, so the "
        "section can be read without the paper open. Also bumps the updated date.",
    )


# ---------------------------------------------------------------- the browser: plain WebDriver


class WebDriver:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.session: str | None = None

    def _req(self, method: str, path: str, body: dict | None = None, timeout: float = 60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.load(r).get("value")
        except urllib.error.HTTPError as e:
            try:
                v = json.load(e).get("value", {})
                detail = f"{v.get('error')}: {v.get('message', '').splitlines()[0]}"
            except (ValueError, AttributeError, IndexError):
                detail = str(e)
            raise Failure(f"WebDriver {method} {path}: {detail}") from None

    def s(self, method: str, path: str, body: dict | None = None):
        return self._req(method, f"/session/{self.session}{path}", body)

    def start(self, chromium: str | None, scale: int, user_data: Path) -> None:
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--force-device-scale-factor={scale}",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--lang=en-US",
            f"--user-data-dir={user_data}",
        ]
        options: dict = {"args": args}
        if chromium:
            options["binary"] = chromium
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
        self.session = self._req("POST", "/session", caps)["sessionId"]

    def quit(self) -> None:
        if self.session:
            try:
                self._req("DELETE", f"/session/{self.session}", timeout=10)
            except (Failure, OSError):
                pass
            self.session = None

    def get(self, url: str) -> None:
        self.s("POST", "/url", {"url": url})

    def url(self) -> str:
        return self.s("GET", "/url")

    def find_all(self, css: str) -> list[str]:
        return [e[ELEMENT] for e in self.s("POST", "/elements", {"using": "css selector", "value": css})]

    def attribute(self, element: str, name: str) -> str | None:
        return self.s("GET", f"/element/{element}/attribute/{name}")

    def script(self, js: str, *args):
        return self.s("POST", "/execute/sync", {"script": js, "args": list(args)})

    def wait_for(self, css: str, count: int = 1, timeout: float = 10.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.find_all(css)
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise Failure(f"{len(found)} of {count} `{css}` on {self.url()} after {timeout:.0f} s")
            time.sleep(0.2)

    def fit_height(self, min_height: int) -> None:
        """Make the viewport exactly as tall as the page (at least `min_height` CSS pixels)."""
        # The body's own height: the document's scrollHeight is never less than the viewport.
        body = self.script("return Math.ceil(document.body.getBoundingClientRect().height);")
        want = max(min_height, int(body))
        for _ in range(3):  # the window's chrome, if any, is not part of the viewport
            inner = int(self.script("return window.innerHeight;"))
            if inner == want:
                break
            rect = self.s("GET", "/window/rect")
            self.s("POST", "/window/rect", {"width": WIDTH, "height": rect["height"] + want - inner})
        self.script("window.scrollTo(0, 0);")

    def screenshot(self, path: Path) -> int:
        # Wait for web fonts/layout to settle, then a frame.
        self.script("return document.fonts ? document.fonts.status : 'loaded';")
        time.sleep(0.3)
        png = base64.b64decode(self.s("GET", "/screenshot"))
        path.write_bytes(png)
        return len(png)


# ---------------------------------------------------------------- the run


def default_bin() -> Path:
    release = REPO / "target" / "release" / "vaultgate"
    return release if release.exists() else REPO / "target" / "debug" / "vaultgate"


def stop(proc: subprocess.Popen | None, group: bool = False) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.wait()


def shoot(args: argparse.Namespace, tmp: Path, procs: dict) -> list[tuple[Path, int]]:
    exe = str(Path(args.bin).resolve())
    home = tmp / "home"
    vault = tmp / "vault"
    shutil.copytree(FIXTURE, vault)
    vg = [exe, "--home", str(home)]
    # The page's header names the person logged in ("review:<$USER>"): a fixed name keeps the
    # developer's login out of the committed pictures.
    os.environ["USER"] = os.environ["LOGNAME"] = "alex"
    run(vg + ["init"])
    run(vg + ["vault", "add", str(vault), "--id", VAULT_ID, "--name", VAULT_NAME, "--default"])
    token = run(vg + ["token", "issue", "--name", AGENT, "--tier", "propose", "--format", "token"]).strip()

    port = free_port()
    procs["serve_log"] = tmp / "serve.log"
    with open(procs["serve_log"], "wb") as serve_log:
        procs["serve"] = subprocess.Popen(
            vg + ["serve", "--port", str(port)], stdin=subprocess.DEVNULL, stdout=serve_log, stderr=serve_log
        )
    wait_http(f"http://127.0.0.1:{port}/review/", procs["serve"], "vaultgate serve")
    log(f"vaultgate serve on port {port}")

    agent = procs["agent"] = Agent(exe, home, token)
    make_proposals(agent)
    agent.close()
    log("made 4 proposals over stdio")

    cd_port = free_port()
    procs["chromedriver"] = subprocess.Popen(
        [args.chromedriver, f"--port={cd_port}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so stopping it also ends Chromium
    )
    wait_http(f"http://127.0.0.1:{cd_port}/status", procs["chromedriver"], "chromedriver")
    wd = procs["webdriver"] = WebDriver(cd_port)
    wd.start(args.chromium, args.scale, tmp / "chromium")
    log("chromium started")

    login = run(vg + ["review", "--port", str(port)]).strip().splitlines()[-1]
    if "/review/login?code=" not in login:
        raise Failure(f"vaultgate review printed no login link: {login!r}")
    wd.get(login)
    if not wd.url().endswith("/inbox"):
        raise Failure(f"the login link led to {wd.url()}, not an inbox")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    rows = wd.wait_for("tr.proposal", count=4)
    wd.fit_height(args.min_height)
    path = out / "review-inbox.png"
    written.append((path, wd.screenshot(path)))

    link = None
    for row in rows:
        if wd.attribute(row, "data-kind") != "patch":
            continue
        for a in wd.s("POST", f"/element/{row}/elements", {"using": "css selector", "value": "a.open"}):
            href = wd.s("GET", f"/element/{a[ELEMENT]}/property/href")  # absolute, unlike the attribute
            text = wd.s("GET", f"/element/{a[ELEMENT]}/text")
            if href and text.strip() == "z/attention.md":
                link = href
    if link is None:
        raise Failure("no patch proposal for z/attention.md in the inbox")
    wd.s("POST", "/window/rect", {"width": WIDTH, "height": HEIGHT})
    wd.get(link)
    wd.wait_for("table#diff-split")
    wd.wait_for("#apply-button")
    wd.fit_height(args.min_height)
    path = out / "review-proposal.png"
    written.append((path, wd.screenshot(path)))
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(default_bin()), help="the vaultgate binary (default: %(default)s)")
    ap.add_argument("--out", default=str(REPO / "docs"), help="where the PNGs go (default: %(default)s)")
    ap.add_argument("--scale", type=int, default=1, choices=[1, 2], help="device pixels per CSS pixel")
    ap.add_argument("--min-height", type=int, default=480, help="shortest screenshot, in CSS pixels")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    ap.add_argument("--chromedriver", default=shutil.which("chromedriver") or "chromedriver")
    args = ap.parse_args()
    if not Path(args.bin).is_file():
        log(f"no vaultgate binary at {args.bin}: build it (cargo build) or pass --bin")
        return 2

    # SIGTERM ends the run like Ctrl-C does, so the cleanup below still happens.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="vaultgate-screens-"))
    procs: dict = {}
    code = 0
    try:
        written = shoot(args, tmp, procs)
        for path, size in written:
            print(f"wrote {path} ({size // 1024} KB)")
        print(f"done in {time.monotonic() - started:.1f} s")
    except Exception as e:  # noqa: BLE001 - report it, clean up, exit 1
        if isinstance(e, (Failure, OSError)):
            log(f"screenshots failed: {e}")
        else:
            log("screenshots failed:\n" + traceback.format_exc().rstrip())
        serve_log = procs.get("serve_log")
        if serve_log and serve_log.exists():
            tail = serve_log.read_text(errors="replace").splitlines()[-15:]
            if tail:
                log("last lines of vaultgate serve's log:\n  " + "\n  ".join(tail))
        code = 1
    except KeyboardInterrupt:
        log("interrupted")
        code = 130
    finally:
        if "webdriver" in procs:
            procs["webdriver"].quit()
        stop(procs.get("chromedriver"), group=True)
        if "agent" in procs:
            procs["agent"].close()
        stop(procs.get("serve"))
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
