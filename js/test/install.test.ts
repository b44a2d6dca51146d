// Without a tapeproxy to run, a test says in one line how to install it.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { INSTALL_HINT, tapeproxyCommand } from "../src/server.js";
import { baseEnv, run, vitest } from "./support.js";

const temp = mkdtempSync(join(tmpdir(), "tapeproxy-js-install-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

async function fixture(env: NodeJS.ProcessEnv): Promise<string> {
  const ran = await vitest(["--config", "test/fixtures/vitest.config.ts", "agent"], { ...env, TAPEPROXY_CASSETTES: temp });
  expect(ran.status, ran.output).not.toBe(0);
  return ran.output;
}

test("TAPEPROXY_BIN, else tapeproxy on PATH, else python3 -m tapeproxy", () => {
  expect(tapeproxyCommand({ TAPEPROXY_BIN: "/opt/tp/bin/tapeproxy", PATH: "/usr/bin" })).toEqual(["/opt/tp/bin/tapeproxy"]);
  expect(tapeproxyCommand({ TAPEPROXY_BIN: "uvx tapeproxy" })).toEqual(["uvx", "tapeproxy"]);
  expect(tapeproxyCommand({ PATH: temp })).toEqual(["python3", "-m", "tapeproxy"]);
});

test("a TAPEPROXY_BIN path with a space in it runs", async () => {
  const folder = join(temp, "Program Files");
  mkdirSync(folder);
  const bin = join(folder, "tapeproxy");
  symlinkSync(baseEnv().TAPEPROXY_BIN ?? "tapeproxy", bin);
  expect(tapeproxyCommand({ TAPEPROXY_BIN: bin })).toEqual([bin]);
  const output = await fixture(baseEnv({ TAPEPROXY_BIN: bin })); // replay, no cassette: a miss
  expect(output).toContain("tapeproxy: 1 request(s) missed cassette");
});

test("a TAPEPROXY_BIN that is not there", async () => {
  const output = await fixture(baseEnv({ TAPEPROXY_BIN: join(temp, "no-such-tapeproxy") }));
  expect(output).toContain(`Error: ${INSTALL_HINT}\n`);
});

test("no tapeproxy on PATH, and a python3 without it", async (context) => {
  // A PATH with only a python3 that has no tapeproxy module: the system's, if that is so here.
  const bare = await run("/usr/bin/python3", ["-c", "import tapeproxy"], baseEnv());
  if (bare.status === 0) context.skip("this machine's /usr/bin/python3 has tapeproxy installed");
  const bin = join(temp, "bin");
  mkdirSync(bin);
  symlinkSync("/usr/bin/python3", join(bin, "python3"));
  const env = baseEnv({ PATH: bin });
  delete env.TAPEPROXY_BIN;
  expect(await fixture(env)).toContain(`Error: ${INSTALL_HINT}\n`);
});
