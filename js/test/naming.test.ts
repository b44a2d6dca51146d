// A test's cassette is named as the pytest plugin names one: the same node ids give the same
// names as tapeproxy.store.names.cassette_for_test, asked of Python itself.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { cassetteForTest, cassetteLibrary, libraryPrefix, nodeId } from "../src/naming.js";
import { PYTHON, baseEnv, jest, run, vitest } from "./support.js";

const library = mkdtempSync(join(tmpdir(), "tapeproxy-js-naming-"));
afterAll(() => rmSync(library, { recursive: true, force: true }));

const CASES: [string, string | undefined][] = [
  ["tests/test_chat.py::test_a", "tests"],
  ["tests/test_chat.py::TestA::test_b[x]", "tests"],
  ["tests/test_chat.py::TestA::test_b[x-1.5]", undefined],
  ["tests/unit/test_chat.py::test_a", "."],
  ["test_chat.py::answers a chat", undefined],
  ["tests/test_chat.py::Chat::streams: a reply (with usage)", "tests"],
  ["tests/test_chat.py::.hidden", "tests"],
  ["tests/test_chat.py::ünïcödé ✓ 😀", "tests"],
  ["tests/test_chat.py::" + "long title ".repeat(30), "tests"],
  ["tests/test_chat.py::" + "x".repeat(250), "tests"],
];

test("the same names as cassette_for_test", async () => {
  const script =
    "import json, sys\nfrom tapeproxy.store.names import cassette_for_test\n" +
    "print(json.dumps([cassette_for_test(i, p) for i, p in json.load(sys.stdin)]))";
  const ran = await run(PYTHON, ["-c", script], baseEnv(), JSON.stringify(CASES));
  expect(ran.status, ran.output).toBe(0);
  expect(CASES.map(([id, prefix]) => cassetteForTest(id, prefix))).toEqual(JSON.parse(ran.output));
});

test("a JS or TS file is named without its extension, and without the library's folder", () => {
  const root = "/project";
  const library = cassetteLibrary(root, undefined);
  expect(library).toBe("/project/tests/cassettes");
  const prefix = libraryPrefix(root, library);
  expect(prefix).toBe("tests");
  const id = nodeId(root, "/project/tests/agent/chat.test.ts", ["Chat", "answers"]);
  expect(id).toBe("tests/agent/chat.test.ts::Chat::answers");
  expect(cassetteForTest(id, prefix)).toBe("agent/chat.test/Chat/answers");
  expect(cassetteForTest("src/chat.spec.mjs::answers", prefix)).toBe("src/chat.spec/answers");
});

test("TAPEPROXY_CASSETTES: a folder under the root, or a URL under no root", () => {
  expect(cassetteLibrary("/project", "recordings")).toBe("/project/recordings");
  expect(libraryPrefix("/project", "/project/recordings")).toBe(".");
  expect(cassetteLibrary("/project", "s3://bucket/prefix")).toBe("s3://bucket/prefix");
  expect(libraryPrefix("/project", "s3://bucket/prefix")).toBeUndefined();
  expect(libraryPrefix("/project", "/elsewhere/cassettes")).toBeUndefined();
});

// pytest's node ids are unique; a JS file's titles need not be. Tests that share one (the n-th
// is `title[n]`, as pytest names a parameter) never share a cassette, whichever the runner.
test("tests that share a title have cassettes of their own (vitest, jest)", async () => {
  const env = baseEnv({ TAPEPROXY_CASSETTES: library });
  const ranVitest = await vitest(["--config", "test/fixtures/vitest.config.ts", "names"], env);
  expect(ranVitest.status, ranVitest.output).toBe(0);
  const ranJest = await jest(["-c", "test/fixtures/names/jest.config.cjs"], env);
  expect(ranJest.status, ranJest.output).toBe(0);
});
