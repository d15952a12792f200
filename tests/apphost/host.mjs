// A minimal MCP Apps host for vaultgate's approval-card browser tests
// (tests/blackbox/card_browser.rs): serves a page whose script (src/page.js, bundled by
// build.mjs) is the MCP client and the ext-apps SDK's AppBridge, and proxies that page's MCP
// traffic to vaultgate — adding the bearer token and dropping the browser's Origin and cookies,
// as a real host's backend does. Loopback only.
//
//   node host.mjs <vaultgate MCP URL, e.g. http://127.0.0.1:PORT/mcp>
//   env VAULTGATE_TOKEN=<bearer token>   (or a second argument)
//
// Prints one line `listening <port>` on stdout once it serves.
import http from "node:http";
import { bundle } from "./build.mjs";

const upstream = new URL(process.argv[2] || "");
const token = process.env.VAULTGATE_TOKEN || process.argv[3] || "";
if (!/^https?:$/.test(upstream.protocol) || !token) {
  console.error("usage: VAULTGATE_TOKEN=T node host.mjs http://127.0.0.1:PORT/mcp");
  process.exit(2);
}

const js = await bundle();

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>vaultgate test host</title>
<style>
  :root { color-scheme: light; }
  body { margin: 0; padding: 16px; font: 14px/1.4 system-ui, sans-serif; background: #f0f0f3; color: #1d1d1f; }
  body.dark { color-scheme: dark; background: #121316; color: #e8e8ea; }
  #host { width: 720px; }
  #host iframe { display: block; width: 100%; height: 200px; border: 1px solid #c8c8cc; border-radius: 10px; background: transparent; }
  body.dark #host iframe { border-color: #3a3b40; }
  #status { font-size: 12px; color: #6b6b70; margin: 0 0 8px; }
</style>
</head>
<body>
<p id="status">loading…</p>
<div id="host"></div>
<script type="module" src="/host.js"></script>
</body>
</html>
`;

// What the page's MCP requests may carry on to vaultgate: nothing that is the browser's own
// (Origin, Referer, cookies, Sec-Fetch-*), and never the page's Host.
const FORWARD = ["content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id", "content-length"];
const HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade"]);

function proxy(req, res) {
  const headers = { authorization: `Bearer ${token}` };
  for (const h of FORWARD) if (req.headers[h] !== undefined) headers[h] = req.headers[h];
  const up = http.request(
    { hostname: upstream.hostname, port: upstream.port, path: upstream.pathname + upstream.search, method: req.method, headers },
    (ur) => {
      const out = {};
      for (const [k, v] of Object.entries(ur.headers)) if (!HOP.has(k)) out[k] = v;
      res.writeHead(ur.statusCode || 502, out);
      if (typeof res.flushHeaders === "function") res.flushHeaders();
      ur.pipe(res);
    },
  );
  up.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
    res.end(`upstream: ${e.message}`);
  });
  res.on("close", () => up.destroy());
  req.pipe(up);
}

const server = http.createServer((req, res) => {
  const path = new URL(req.url || "/", "http://host").pathname;
  if (path === "/mcp" && ["POST", "GET", "DELETE"].includes(req.method || "")) return proxy(req, res);
  if (req.method !== "GET") {
    res.writeHead(405, { "content-type": "text/plain" });
    return res.end("method not allowed");
  }
  if (path === "/") {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
    return res.end(PAGE);
  }
  if (path === "/host.js") {
    res.writeHead(200, { "content-type": "text/javascript; charset=utf-8", "cache-control": "no-store" });
    return res.end(js);
  }
  res.writeHead(404, { "content-type": "text/plain" });
  res.end("not found");
});

server.listen(0, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
