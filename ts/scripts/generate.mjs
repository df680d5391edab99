// Generate src/gen/scaler.ts from the wire schema (src/scaler/protocol/scaler.capnp) with the Cap'n Proto
// compiler (`capnp`, Debian package capnproto) and capnp-es's plugin. The generated code is not committed.
import { execFileSync } from "node:child_process";
import { mkdirSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const ts = resolve(here, "..");
const schemaDir = resolve(ts, "..", "src", "scaler", "protocol");
const out = join(ts, "src", "gen");
const plugin = join(ts, "node_modules", ".bin", "capnpc-ts");
if (!existsSync(plugin)) {
  console.error(`generate: ${plugin} is missing: run npm ci in ${ts}`);
  process.exit(1);
}
mkdirSync(out, { recursive: true });
try {
  execFileSync("capnp", ["compile", `-o${plugin}:${out}`, `--src-prefix=${schemaDir}`, join(schemaDir, "scaler.capnp")], {
    stdio: ["ignore", "ignore", "inherit"],
  });
} catch (error) {
  console.error(`generate: capnp compile failed (is the capnp compiler installed? Debian: capnproto): ${error}`);
  process.exit(1);
}
