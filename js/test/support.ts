// What the meta-tests share: the Python that runs the fake provider, the fake itself, a test
// runner run as a subprocess, and the exchange files of a cassette library.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { createInterface } from "node:readline";

export const JS = resolve(import.meta.dirname, "..");
const VENV = resolve(JS, "../.venv/bin");

/** The Python with tapeproxy's test dependencies: TAPEPROXY_PYTHON, the repository's .venv,
 * else python3. */
export const PYTHON =
  process.env.TAPEPROXY_PYTHON ?? (existsSync(join(VENV, "python")) ? join(VENV, "python") : "python3");

/** The environment the runners under test get: the repository's tapeproxy unless one is given. */
export function baseEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0" };
  for (const name of Object.keys(env)) {
    if (name.startsWith("TAPEPROXY_") && name !== "TAPEPROXY_BIN") delete env[name];
    if (name.startsWith("VITEST") || name === "JEST_WORKER_ID") delete env[name];
  }
  if (!env.TAPEPROXY_BIN && existsSync(join(VENV, "tapeproxy"))) env.TAPEPROXY_BIN = join(VENV, "tapeproxy");
  env.OPENAI_API_KEY = "sk-test-js-suite";
  env.ANTHROPIC_API_KEY = "sk-ant-test-js-suite";
  return { ...env, ...extra };
}

export interface Fake {
  url: string;
  stop(): Promise<void>;
}

/** The repository's fake provider (tests/fakes/upstream.py), on a free port. */
export async function startFake(): Promise<Fake> {
  const child = spawn(PYTHON, [join(JS, "test/fake_upstream.py")], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const lines = createInterface({ input: child.stdout! });
  const url = await new Promise<string>((done, fail) => {
    lines.once("line", done);
    child.once("exit", (code) => fail(new Error(`the fake provider stopped (${code})`)));
  });
  return {
    url,
    async stop() {
      child.stdin!.end();
      await exited;
    },
  };
}

/** Upstreams pointed at the fake (or at a closed port when it is stopped). */
export function upstreams(url: string): string {
  return `openai=${url},anthropic=${url}`;
}

export interface Ran {
  status: number | null;
  output: string;
}

/** Run a command (in js/) with `input` on its stdin; its stdout and stderr together. */
export function run(command: string, args: string[], env: NodeJS.ProcessEnv, input = "", cwd = JS): Promise<Ran> {
  return new Promise((done) => {
    const child = spawn(command, args, { cwd, env, stdio: [input ? "pipe" : "ignore", "pipe", "pipe"] });
    child.stdin?.on("error", () => undefined).end(input); // read or not, as the command likes
    let output = "";
    child.stdout!.on("data", (chunk) => (output += chunk));
    child.stderr!.on("data", (chunk) => (output += chunk));
    child.on("exit", (status) => done({ status, output }));
  });
}

export function vitest(args: string[], env: NodeJS.ProcessEnv): Promise<Ran> {
  return run(process.execPath, [join(JS, "node_modules/vitest/vitest.mjs"), "run", ...args], env);
}

export function jest(args: string[], env: NodeJS.ProcessEnv): Promise<Ran> {
  return run(process.execPath, [join(JS, "node_modules/jest/bin/jest.js"), ...args], env);
}

/** Every exchange file of a library, by path, with a hash of its content. */
export function exchangeFiles(library: string): Map<string, string> {
  const found = new Map<string, string>();
  if (!existsSync(library)) return found;
  for (const entry of readdirSync(library, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath, entry.name);
    if (!entry.isFile() || !entry.name.endsWith(".json") || path.includes("/.tapeproxy/")) continue;
    found.set(relative(library, path), createHash("sha256").update(readFileSync(path)).digest("hex"));
  }
  return found;
}

/** The tapeproxy servers still running on a library (there should be none once a run ends). */
export async function serversOn(library: string): Promise<string[]> {
  const ps = await run("ps", ["-ww", "-eo", "pid=,args="], process.env);
  return ps.output.split("\n").filter((line) => line.includes(` --cassettes ${library}`) && line.includes(" serve "));
}

/** Wait up to `ms` for the servers on `library` to be gone. */
export async function serversGone(library: string, ms = 20_000): Promise<string[]> {
  const until = Date.now() + ms;
  let left = await serversOn(library);
  while (left.length && Date.now() < until) {
    await new Promise((done) => setTimeout(done, 100));
    left = await serversOn(library);
  }
  return left;
}
