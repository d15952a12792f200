// Bundles the host page's script (src/page.js: the MCP client and the ext-apps AppBridge) for the
// browser with esbuild. `bundle()` is what host.mjs serves as /host.js; run directly
// (`npm run build`), it writes dist/host.js for a look at what the browser gets.
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { mkdirSync, writeFileSync } from "node:fs";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));

export async function bundle() {
  const r = await esbuild.build({
    entryPoints: [join(here, "src", "page.js")],
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    target: "es2022",
    logLevel: "silent",
  });
  return r.outputFiles[0].text;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const js = await bundle();
  mkdirSync(join(here, "dist"), { recursive: true });
  writeFileSync(join(here, "dist", "host.js"), js);
  console.log(`dist/host.js: ${js.length} bytes`);
}
