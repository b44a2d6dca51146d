// Tests that run at once in one file would share the server's one cassette and leave the
// placeholder key and base URLs set after them: they fail, each in one line, and leave none.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { CONCURRENT } from "../src/tape.js";
import { baseEnv, vitest } from "./support.js";

const library = mkdtempSync(join(tmpdir(), "tapeproxy-js-concurrent-"));
afterAll(() => rmSync(library, { recursive: true, force: true }));

test("test.concurrent fails in one line, and leaves the environment as it was", async () => {
  const env = baseEnv({ TAPEPROXY_CASSETTES: library });
  delete env.OPENAI_API_KEY; // replay sets a placeholder for it while a test runs
  const ran = await vitest(["--config", "test/fixtures/vitest.config.ts", "concurrent"], env);
  expect(ran.status).not.toBe(0);
  expect(ran.output).toContain("FAIL  test/fixtures/concurrent.test.ts > one\n");
  expect(ran.output).toContain("FAIL  test/fixtures/concurrent.test.ts > two\n");
  expect(ran.output).toContain(`Error: ${CONCURRENT}\n`);
  expect(ran.output).toContain("after them: OPENAI_API_KEY unset, OPENAI_BASE_URL unset");
});
