// A runner killed outright (SIGKILL: no hook, no exit handler runs) leaves no server behind:
// its end closes the keeper's pipe, and the keeper stops the server by its pid.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { JS, baseEnv, serversGone, serversOn, vitest } from "./support.js";

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

// TAPEPROXY_BIN may be a wrapper that runs the server as its child without `exec` (a shell
// script, `uvx tapeproxy`): the keeper stops the wrapper's whole process group, not the
// wrapper alone, which would leave its server running.
test("a TAPEPROXY_BIN that wraps the server leaves no server running", async () => {
  const library = join(temp, "wrapped");
  const wrapper = join(temp, "tapeproxy-wrapper.sh");
  writeFileSync(wrapper, '#!/bin/sh\n"$TAPEPROXY_WRAPPED" "$@"\necho "the wrapper is done"\n', { mode: 0o755 });
  const env = baseEnv({ TAPEPROXY_CASSETTES: library });
  const ran = await vitest(["--config", "test/fixtures/vitest.config.ts", "agent"], {
    ...env,
    TAPEPROXY_WRAPPED: env.TAPEPROXY_BIN ?? "tapeproxy",
    TAPEPROXY_BIN: wrapper,
  });
  expect(ran.output).toContain("missed cassette"); // it ran against the wrapped server
  expect(await serversGone(library)).toEqual([]);
});
