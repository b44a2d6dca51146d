// A server that stops in the middle of a run fails the tests after it with what happened and
// the server's last lines, not a bare ECONNREFUSED.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { baseEnv, serversGone, vitest } from "./support.js";

const library = mkdtempSync(join(tmpdir(), "tapeproxy-js-crash-"));
afterAll(() => rmSync(library, { recursive: true, force: true }));

test("a server killed mid-run: the next test says the server stopped, and its last lines", async () => {
  const ran = await vitest(["--config", "test/fixtures/vitest.config.ts", "crash"], baseEnv({ TAPEPROXY_CASSETTES: library }));
  expect(ran.status).not.toBe(0);
  expect(ran.output).toContain("FAIL  test/fixtures/crash.test.ts > the next test");
  expect(ran.output).toMatch(/Error: tapeproxy: the server stopped during the run \(exit status (SIGKILL|\d+)\):\n.*tapeproxy/);
  expect(ran.output).not.toContain("ECONNREFUSED");
  expect(await serversGone(library)).toEqual([]);
});
