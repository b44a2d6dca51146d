// A runner killed outright (SIGKILL: no hook, no exit handler runs) leaves no server behind:
// its end closes the keeper's pipe, and the keeper stops the server by its pid.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { JS, baseEnv, serversGone, serversOn } from "./support.js";

const temp = mkdtempSync(join(tmpdir(), "tapeproxy-js-orphans-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

test.each(["threads", "forks"])("a killed vitest (%s pool) leaves no server running", async (pool) => {
  const library = join(temp, pool);
  const args = [join(JS, "node_modules/vitest/vitest.mjs"), "run", "--config", "test/fixtures/vitest.config.ts", "agent"];
  args.push(`--pool=${pool}`, "--testTimeout=600000");
  const env = baseEnv({ TAPEPROXY_CASSETTES: library, AGENT_HANG: "1" });
  const runner = spawn(process.execPath, args, { cwd: JS, env, stdio: "ignore" });
  try {
    const until = Date.now() + 60_000;
    while ((await serversOn(library)).length < 2 && Date.now() < until) {
      await new Promise((done) => setTimeout(done, 100));
    }
    expect(await serversOn(library)).toHaveLength(2); // the keeper and its server
  } finally {
    runner.kill("SIGKILL");
  }
  expect(await serversGone(library)).toEqual([]);
});
