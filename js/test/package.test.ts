// The package as `npm pack` makes it: its built modules and types, no sources or tests, and
// installable into another project with no network (it has no dependencies; its peers are
// optional), where both entry points load as CommonJS and as ES modules.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { JS, baseEnv, run } from "./support.js";

const temp = mkdtempSync(join(tmpdir(), "tapeproxy-js-pack-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));
const NPM = "npm";

test("npm pack holds dist and its types, and installs offline into a project", async () => {
  const packed = await run(NPM, ["pack", "--ignore-scripts", "--json", "--pack-destination", temp], baseEnv());
  expect(packed.status, packed.output).toBe(0);
  const [{ filename, files }] = JSON.parse(packed.output.slice(packed.output.indexOf("[")));
  const paths: string[] = files.map((file: { path: string }) => file.path).sort();
  for (const entry of ["jest", "vitest"]) {
    for (const build of ["esm", "cjs"]) {
      expect(paths).toContain(`dist/${build}/${entry}.js`);
      expect(paths).toContain(`dist/${build}/${entry}.d.ts`);
    }
  }
  expect(paths).toContain("README.md");
  expect(paths.filter((path) => !path.startsWith("dist/"))).toEqual(["README.md", "package.json"]);

  const project = join(temp, "project");
  const env = baseEnv({ npm_config_cache: join(temp, "cache") });
  await run("mkdir", ["-p", project], env);
  writeFileSync(join(project, "package.json"), '{ "name": "an-agent", "private": true }\n');
  const installed = await run(NPM, ["install", "--offline", "--no-audit", "--no-fund", "--prefix", project, join(temp, filename)], env);
  expect(installed.status, installed.output).toBe(0);
  const manifest = JSON.parse(readFileSync(join(project, "node_modules/tapeproxy/package.json"), "utf8"));
  expect(manifest.dependencies ?? {}).toEqual({});
  const load =
    "const cjs = require('tapeproxy/jest');" +
    "import('tapeproxy/jest').then((esm) => console.log(typeof cjs.useTapeproxy, typeof esm.useTapeproxy));";
  const loaded = await run(process.execPath, ["-e", load], { ...env, NODE_PATH: "" }, "", project);
  expect(loaded.output.trim()).toBe("function function");

  // Its types, for a TypeScript project however it resolves modules: node16 (an ES module
  // and a CommonJS one), bundler, and node10, which `module: commonjs` implies (ts-jest's
  // usual setup), and which reads no `exports`: `typesVersions` points it at the types.
  const consumer = (ext: string) =>
    `import { useTapeproxy as jest, type Mode } from "tapeproxy/jest";\n` +
    `import { useTapeproxy as vitest, type Tapeproxy } from "tapeproxy/vitest";\n` +
    `export const mode: Mode = jest({ cassette: "x" }).mode;\nexport const tape: Tapeproxy = vitest();\n// ${ext}\n`;
  for (const ext of ["ts", "mts", "cts"]) writeFileSync(join(project, `consumer.${ext}`), consumer(ext));
  const tsc = join(JS, "node_modules/typescript/bin/tsc");
  const common = ["--noEmit", "--strict", "--typeRoots", join(JS, "node_modules/@types"), "--types", "node"];
  const resolutions: [string, string, string[]][] = [
    ["node16", "node16", ["consumer.ts", "consumer.mts", "consumer.cts"]],
    ["esnext", "bundler", ["consumer.ts"]],
    ["commonjs", "node10", ["consumer.ts"]],
  ];
  for (const [module, resolution, files] of resolutions) {
    const args = [tsc, ...common, "--module", module, "--moduleResolution", resolution, ...files];
    const checked = await run(process.execPath, args, env, "", project);
    expect(checked.status, `${resolution}: ${checked.output}`).toBe(0);
  }
});
