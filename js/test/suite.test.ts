// The SDK suite (test/suite: openai, the Vercel AI SDK, @anthropic-ai/sdk, faults) recorded
// with TAPEPROXY_MODE=once in vitest's threads pool and in its forks pool, then replayed with
// the fake provider stopped in the forks pool and in one non-isolated worker: every test
// passes, every worker has its own server, nothing is lost, no server is left running, and
// the cassettes hold the files the pytest plugin writes for the same calls.
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { afterAll, beforeAll, expect, test } from "vitest";
import {
  PYTHON, baseEnv, exchangeFiles, run, serversGone, startFake, upstreams, vitest, type Fake, type Ran,
} from "./support.js";

const CLOSED = "http://127.0.0.1:9"; // where the upstreams point once the fake is stopped
const TESTS = 9;
const temp = mkdtempSync(join(tmpdir(), "tapeproxy-js-suite-"));
const library = join(temp, "cassettes");
let fake: Fake | undefined;
let recorded: Map<string, string>;

interface Line {
  worker: string;
  url: string;
  cassette: string;
  mode: string;
}

async function suite(name: string, mode: string, upstream: string, args: string[], into = library): Promise<Line[]> {
  const folder = join(temp, name);
  mkdirSync(folder);
  const env = { TAPEPROXY_CASSETTES: into, TAPEPROXY_MODE: mode, TAPEPROXY_UPSTREAM: upstreams(upstream), JS_SUITE_REPORT: folder };
  const ran: Ran = await vitest(["--config", "test/suite/vitest.config.ts", ...args], baseEnv(env));
  expect(ran.status, ran.output).toBe(0);
  expect(ran.output).toMatch(new RegExp(`Tests\\s+${TESTS} passed`));
  expect(await serversGone(into)).toEqual([]);
  return readFileSync(join(folder, "tests.jsonl"), "utf8").trim().split("\n").map((line) => JSON.parse(line));
}

/** Each worker talked to one server, and no two workers to the same one. */
function serversPerWorker(lines: Line[]): Map<string, Set<string>> {
  const servers = new Map<string, Set<string>>();
  for (const { worker, url } of lines) servers.set(worker, (servers.get(worker) ?? new Set()).add(url));
  const urls = [...servers.values()].flatMap((set) => [...set]);
  expect(new Set(urls).size).toBe(urls.length);
  return servers;
}

beforeAll(async () => {
  fake = await startFake();
});
afterAll(async () => {
  await fake?.stop();
  rmSync(temp, { recursive: true, force: true });
});

test("once records every test in the threads pool, each worker on its own server", async () => {
  const lines = await suite("record", "once", fake!.url, ["--pool=threads", "--maxWorkers=2"]);
  expect(lines).toHaveLength(TESTS);
  const servers = serversPerWorker(lines);
  expect(servers.size).toBeGreaterThan(1);
  for (const urls of servers.values()) expect(urls.size).toBe(1);
  recorded = exchangeFiles(library);
  // One recording per test (the faulted requests are never written), each in its test's cassette.
  expect(recorded.size).toBe(TESTS);
  const cassettes = new Set([...recorded.keys()].map((file) => dirname(file)));
  expect(cassettes).toEqual(new Set(lines.map((line) => line.cassette)));
  expect(cassettes).toContain(lines.find((line) => line.cassette.includes("openai/answers_a_chat"))?.cassette);
});

test("once records the same files in the forks pool, each worker on its own server", async () => {
  const forks = join(temp, "forks-cassettes");
  const lines = await suite("record-forks", "once", fake!.url, ["--pool=forks", "--maxWorkers=2"], forks);
  expect(lines).toHaveLength(TESTS);
  expect(serversPerWorker(lines).size).toBeGreaterThan(1);
  expect([...exchangeFiles(forks).keys()].sort()).toEqual([...recorded.keys()].sort());
});

test("the pytest plugin records the same files for the same calls", async () => {
  const python = join(temp, "python");
  const env = baseEnv({ TAPEPROXY_UPSTREAM: upstreams(fake!.url) });
  const args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", "test/fixtures"];
  args.push("test/fixtures/test_same_calls.py", "--tapeproxy-mode", "once", "--tapeproxy-cassettes", python);
  const ran = await run(PYTHON, args, env);
  expect(ran.status, ran.output).toBe(0);
  const pairs = {
    "test_same_calls/test_answers_a_chat": "test/suite/openai.test/openai/answers_a_chat-",
    "test_same_calls/test_streams_a_chat": "test/suite/openai.test/openai/streams_a_chat-",
    "test_same_calls/test_answers_a_message": "test/suite/anthropic.test/answers_a_message-",
    "test_same_calls/test_streams_a_message": "test/suite/anthropic.test/streams_a_message-",
  };
  const theirs = [...exchangeFiles(python).keys()];
  for (const [pytestCassette, jsCassette] of Object.entries(pairs)) {
    const pyFiles = theirs.filter((file) => dirname(file) === pytestCassette);
    const jsFiles = [...recorded.keys()].filter((file) => dirname(file).startsWith(jsCassette));
    expect(pyFiles.map((file) => basename(file))).toEqual(jsFiles.map((file) => basename(file)));
    expect(pyFiles).toHaveLength(1);
    // The same request as stored (credentials and client telemetry left out); the answers
    // differ only in the ids the fake derives from the request's raw bytes.
    const stored = (file: string) => {
      const exchange = JSON.parse(readFileSync(file, "utf8"));
      return { key: exchange.key, ordinal: exchange.ordinal, request: exchange.request, rules: exchange.rules };
    };
    expect(stored(join(library, jsFiles[0]!))).toEqual(stored(join(python, pyFiles[0]!)));
  }
});

test("replay with the fake stopped passes in the forks pool, and writes nothing", async () => {
  await fake!.stop();
  fake = undefined;
  const lines = await suite("replay-forks", "replay", CLOSED, ["--pool=forks", "--maxWorkers=2"]);
  expect(new Set(lines.map((line) => line.mode))).toEqual(new Set(["replay"]));
  expect(serversPerWorker(lines).size).toBeGreaterThan(1);
  expect(exchangeFiles(library)).toEqual(recorded);
});

test("one worker that runs every file (isolate off) starts one server for them all", async () => {
  const lines = await suite("replay-shared", "replay", CLOSED, ["--pool=threads", "--maxWorkers=1", "--no-isolate"]);
  expect(new Set(lines.map((line) => line.url)).size).toBe(1);
  expect(exchangeFiles(library)).toEqual(recorded);
});
