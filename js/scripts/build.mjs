// Builds dist/esm (import) and dist/cjs (require), each with its .d.ts types, from src/.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

let tsc;
try {
  tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
} catch {
  // `npm install PATH` runs this (prepare) in a folder whose dev dependencies it never installs.
  if (existsSync("dist/esm/vitest.js") && existsSync("dist/cjs/vitest.js")) process.exit(0);
  console.error("tapeproxy: run `npm ci` in js/ first (it builds dist/), or install the .tgz `npm pack` makes there");
  process.exit(1);
}
rmSync("dist", { recursive: true, force: true });
execFileSync(process.execPath, [tsc, "-p", "tsconfig.json"], { stdio: "inherit" });
execFileSync(
  process.execPath,
  [tsc, "-p", "tsconfig.json", "--module", "commonjs", "--moduleResolution", "node10", "--outDir", "dist/cjs"],
  { stdio: "inherit" },
);
mkdirSync("dist/cjs", { recursive: true });
writeFileSync("dist/cjs/package.json", '{ "type": "commonjs" }\n');
