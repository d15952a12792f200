// The test host's page script: an MCP client (the official TypeScript SDK, v2) that declares the
// MCP Apps extension, and the ext-apps SDK's host side (AppBridge) rendering the tool's UI
// resource in a sandboxed iframe, as a chat client would. Driven by the query string:
//
//   /?tool=NAME&args=<JSON arguments>&theme=light|dark
//
// What the test reads back: window.__rendered ({state, ms} per "rendered <state>" log of the
// card, ms since the tool result was sent to it), window.__calls (every tools/call the card made
// through the bridge), window.__opened (every ui/open-link URL), window.__logs, window.__sizes,
// window.__ready (the card was handed its result) and window.__error (why the host failed).
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

const UI = "io.modelcontextprotocol/ui";
const MIME = "text/html;profile=mcp-app";
// The spec's default CSP for a UI resource that declares no domains.
const CSP =
  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; " +
  "connect-src 'none'; frame-src 'none'; base-uri 'none'";

window.__calls = [];
window.__rendered = [];
window.__opened = [];
window.__logs = [];
window.__sizes = [];
window.__ready = false;
window.__error = null;

const status = (text) => {
  document.getElementById("status").textContent = text;
};

/** The HTML with the CSP `<meta>` first in its `<head>` (a `<head>` is made when it has none). */
function withCsp(html) {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${CSP}">`;
  const head = /<head(\s[^>]*)?>/i.exec(html);
  if (head) {
    const at = head.index + head[0].length;
    return html.slice(0, at) + meta + html.slice(at);
  }
  const root = /<html(\s[^>]*)?>/i.exec(html);
  const at = root ? root.index + root[0].length : 0;
  return html.slice(0, at) + `<head>${meta}</head>` + html.slice(at);
}

async function allTools(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

async function main() {
  const q = new URLSearchParams(location.search);
  const tool = q.get("tool");
  const args = JSON.parse(q.get("args") || "{}");
  const theme = q.get("theme") === "dark" ? "dark" : "light";
  if (!tool) throw new Error("no ?tool= in the URL");
  if (theme === "dark") document.body.classList.add("dark");

  status(`connecting to ${location.origin}/mcp`);
  // `?declare=0`: a host that renders MCP Apps without declaring the extension (as Claude and
  // VS Code do).
  const declare = q.get("declare") !== "0";
  const client = new Client(
    { name: "vaultgate-test-host", version: "1" },
    { capabilities: declare ? { extensions: { [UI]: { mimeTypes: [MIME] } } } : {} },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL("/mcp", location.origin)));

  const tools = await allTools(client);
  const def = tools.find((t) => t.name === tool);
  if (!def) throw new Error(`the server lists no tool ${tool}`);
  const uri = def._meta?.ui?.resourceUri ?? def._meta?.["ui/resourceUri"];
  if (!uri) throw new Error(`${tool} names no UI resource (_meta.ui.resourceUri)`);

  status(`calling ${tool}`);
  const result = await client.callTool({ name: tool, arguments: args });

  const read = await client.readResource({ uri });
  const res = read.contents.find((c) => c.uri === uri) ?? read.contents[0];
  if (!res || typeof res.text !== "string") throw new Error(`${uri} has no text contents`);
  if (res.mimeType !== MIME) throw new Error(`${uri} is ${res.mimeType}, not ${MIME}`);

  const iframe = document.createElement("iframe");
  iframe.setAttribute("sandbox", "allow-scripts allow-forms");
  iframe.setAttribute("title", "vaultgate proposal card");
  iframe.id = "card";
  document.getElementById("host").append(iframe);

  const bridge = new AppBridge(
    client,
    { name: "vaultgate-test-host", version: "1" },
    { openLinks: {}, serverTools: {}, serverResources: {}, logging: {} },
    { hostContext: { theme, displayMode: "inline", availableDisplayModes: ["inline"], platform: "web" } },
  );
  bridge.onopenlink = async ({ url }) => {
    window.__opened.push(url);
    return {};
  };
  bridge.addEventListener("sizechange", ({ height }) => {
    window.__sizes.push(height);
    if (typeof height === "number" && height > 0) iframe.style.height = `${Math.ceil(height)}px`;
  });
  bridge.addEventListener("loggingmessage", (p) => {
    window.__logs.push(p);
    const m = typeof p.data === "string" && /^rendered (\S+)$/.exec(p.data);
    if (m) {
      const ms = window.__resultSentAt === undefined ? null : performance.now() - window.__resultSentAt;
      window.__rendered.push({ state: m[1], ms });
    }
  });
  bridge.addEventListener("initialized", async () => {
    try {
      await bridge.sendToolInput({ arguments: args });
      window.__resultSentAt = performance.now();
      await bridge.sendToolResult(result);
      window.__ready = true;
      status(`${tool}: card rendered`);
    } catch (e) {
      fail(e);
    }
  });

  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  // connect() installs the forwarding of tools/call to the server; record each call on its way.
  const forward = bridge.oncalltool;
  if (forward) {
    bridge.oncalltool = async (params, extra) => {
      window.__calls.push({ name: params.name, arguments: params.arguments ?? {} });
      return forward(params, extra);
    };
  }
  status(`${tool}: loading the card`);
  iframe.srcdoc = withCsp(res.text);
}

function fail(e) {
  window.__error = String((e && (e.stack || e.message)) || e);
  status(`error: ${window.__error}`);
}

main().catch(fail);
