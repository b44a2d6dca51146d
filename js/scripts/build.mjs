// Builds dist/esm (import) and dist/cjs (require), each with its .d.ts types, from src/.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
rmSync("dist", { recursive: true, force: true });
execFileSync(process.execPath, [tsc, "-p", "tsconfig.json"], { stdio: "inherit" });
execFileSync(
  process.execPath,
  [tsc, "-p", "tsconfig.json", "--module", "commonjs", "--moduleResolution", "node10", "--outDir", "dist/cjs"],
  { stdio: "inherit" },
);
mkdirSync("dist/cjs", { recursive: true });
writeFileSync("dist/cjs/package.json", '{ "type": "commonjs" }\n');
