// The jest suite (test/jest: openai and @anthropic-ai/sdk through a setupFilesAfterEnv file
// and the CommonJS build) recorded with TAPEPROXY_MODE=once, then replayed with the fake
// provider stopped; its server stops with its file.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { baseEnv, exchangeFiles, jest, serversGone, startFake, upstreams } from "./support.js";

const library = mkdtempSync(join(tmpdir(), "tapeproxy-js-jest-"));
afterAll(() => rmSync(library, { recursive: true, force: true }));

async function suite(mode: string, upstream: string): Promise<string> {
  const env = baseEnv({ TAPEPROXY_CASSETTES: library, TAPEPROXY_MODE: mode, TAPEPROXY_UPSTREAM: upstreams(upstream) });
  const ran = await jest(["-c", "test/jest/jest.config.cjs"], env);
  expect(ran.status, ran.output).toBe(0);
  expect(ran.output).toMatch(/Tests:\s+4 passed, 4 total/);
  expect(await serversGone(library)).toEqual([]);
  return ran.output;
}

test("jest records once, then replays with the fake stopped", async () => {
  const fake = await startFake();
  try {
    await suite("once", fake.url);
  } finally {
    await fake.stop();
  }
  const recorded = exchangeFiles(library);
  expect([...recorded.keys()].map((file) => file.split("/").slice(0, -1).join("/")).sort()).toEqual([
    expect.stringMatching(/^test\/jest\/sdk\.test\/a_fault_set_by_the_test_and_the_recorded_answer_on_the_retry-\w{8}$/),
    expect.stringMatching(/^test\/jest\/sdk\.test\/anthropic_answers_a_message-\w{8}$/),
    expect.stringMatching(/^test\/jest\/sdk\.test\/openai\/answers_a_chat-\w{8}$/),
    expect.stringMatching(/^test\/jest\/sdk\.test\/openai\/streams_a_chat-\w{8}$/),
  ]);
  await suite("replay", "http://127.0.0.1:9");
  expect(exchangeFiles(library)).toEqual(recorded);
});

test("with injectGlobals: false, tapeproxy/jest takes its hooks from @jest/globals", async () => {
  const env = baseEnv({ TAPEPROXY_CASSETTES: library });
  const ran = await jest(["-c", "test/fixtures/noglobals/jest.config.cjs"], env);
  expect(ran.status, ran.output).toBe(0);
  expect(ran.output).toMatch(/Tests:\s+1 passed, 1 total/);
});
