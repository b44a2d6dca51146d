// useTapeproxy's options: a cassette every test of the file shares, and the file's mode, which
// TAPEPROXY_MODE overrides; a TAPEPROXY_MODE that is no mode fails in one line.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { baseEnv, exchangeFiles, startFake, upstreams, vitest } from "./support.js";

const library = mkdtempSync(join(tmpdir(), "tapeproxy-js-options-"));
afterAll(() => rmSync(library, { recursive: true, force: true }));
const options = (env: Record<string, string>) =>
  vitest(["--config", "test/fixtures/vitest.config.ts", "options"], baseEnv({ TAPEPROXY_CASSETTES: library, ...env }));

test("the file's cassette and mode (once), then TAPEPROXY_MODE=replay over it", async () => {
  const fake = await startFake();
  try {
    const recorded = await options({ TAPEPROXY_UPSTREAM: upstreams(fake.url) });
    expect(recorded.status, recorded.output).toBe(0);
  } finally {
    await fake.stop();
  }
  // The first test recorded; the second, on the same cassette, replayed it.
  expect([...exchangeFiles(library).keys()]).toEqual([expect.stringMatching(/^shared\/greetings\/[0-9a-f]{64}\.json$/)]);
  const replayed = await options({ TAPEPROXY_MODE: "replay", TAPEPROXY_UPSTREAM: upstreams("http://127.0.0.1:9") });
  expect(replayed.status, replayed.output).toBe(0);
});

test("a TAPEPROXY_MODE that is no mode", async () => {
  const ran = await options({ TAPEPROXY_MODE: "replay-all" });
  expect(ran.status).not.toBe(0);
  expect(ran.output).toContain("Error: tapeproxy: TAPEPROXY_MODE=replay-all: use one of record, replay, auto, once, passthrough\n");
});
