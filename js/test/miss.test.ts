// A test whose prompt changed fails with the miss report, though its agent caught the error:
// the fixture agent (test/fixtures) recorded once, then run again on another prompt.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { baseEnv, exchangeFiles, jest, serversGone, startFake, upstreams, vitest, type Fake } from "./support.js";

let fake: Fake;
beforeAll(async () => {
  fake = await startFake();
});
afterAll(async () => {
  await fake?.stop();
});

const runners = {
  vitest: (env: NodeJS.ProcessEnv) => vitest(["--config", "test/fixtures/vitest.config.ts", "agent"], env),
  jest: (env: NodeJS.ProcessEnv) => jest(["-c", "test/fixtures/jest.config.cjs"], env),
};

describe.each(Object.entries(runners))("%s", (name, runFixture) => {
  const library = mkdtempSync(join(tmpdir(), `tapeproxy-js-miss-${name}-`));
  afterAll(() => rmSync(library, { recursive: true, force: true }));
  const env = (mode: string, prompt: string) =>
    baseEnv({
      TAPEPROXY_CASSETTES: library,
      TAPEPROXY_MODE: mode,
      TAPEPROXY_UPSTREAM: upstreams(fake.url),
      TAPEPROXY_ADMIN_TOKEN: "a-token-the-control-puts-carry",
      AGENT_PROMPT: prompt,
    });

  // The server here has an admin token (TAPEPROXY_ADMIN_TOKEN): the helper's PUTs carry it.
  test("the agent's test records once, then replays", async () => {
    const recorded = await runFixture(env("once", "What is the capital of France?"));
    expect(recorded.status, recorded.output).toBe(0);
    expect([...exchangeFiles(library).keys()]).toHaveLength(1);
    const replayed = await runFixture(env("replay", "What is the capital of France?"));
    expect(replayed.status, replayed.output).toBe(0);
  });

  test("a changed prompt fails the test with the closest recording and what differs", async () => {
    const missed = await runFixture(env("replay", "What is the capital of Peru?"));
    expect(missed.status, missed.output).not.toBe(0);
    const output = missed.output;
    expect(output).toContain("tapeproxy: 1 request(s) missed cassette 'test/fixtures/agent.test/the_agent_answers-");
    expect(output).toContain("(mode replay, in " + library);
    expect(output).toMatch(/Closest recording: \S+\.json \(POST openai \/v1\/chat\/completions\); it differs in:/);
    expect(output).toContain("What is the capital of Peru?");
    expect(output).toContain("What is the capital of France?");
    expect(await serversGone(library)).toEqual([]);
  });
});
