// tapeproxy for jest: `useTapeproxy()` at the top of a test file or in a setupFilesAfterEnv file.
import { distinctTitle } from "./naming.js";
import { failure, type Server } from "./server.js";
import { Tapeproxy, type TapeproxyOptions } from "./tape.js";

export { Tapeproxy, type Mode, type TapeproxyOptions } from "./tape.js";

type Hook = (fn: () => Promise<void>, timeout?: number) => void;
interface JestGlobals {
  beforeAll: Hook;
  beforeEach: Hook;
  afterEach: Hook;
  afterAll: Hook;
  expect?: { getState?: () => { testPath?: string; currentTestName?: string } };
}

interface CircusBlock {
  name: string;
  parent?: CircusBlock;
  children?: CircusBlock[];
}
interface CircusState {
  currentlyRunningTest?: CircusBlock | null;
}
const CIRCUS = "JEST_STATE_SYMBOL";
const ROOT = "ROOT_DESCRIBE_BLOCK";

/** Run each test of this file (or of every file, from a setup file) against a tapeproxy
 * server, with its own cassette; a test whose requests missed it fails. Each test file has
 * its own module registry and global in jest, so the server is the file's, stopped after it. */
export function useTapeproxy(options?: TapeproxyOptions): Tapeproxy {
  const { beforeAll, beforeEach, afterEach, afterAll, expect } = jestGlobals();
  const tape = new Tapeproxy(options);
  const file: { server?: Promise<Server> } = {};
  beforeAll(() => tape.attach(file), 90_000);
  beforeEach(() => tape.begin(currentTest(expect)));
  afterEach(async () => {
    const report = await tape.end();
    if (report) throw failure(report);
  });
  afterAll(() => tape.detach(), 30_000);
  return tape;
}

/** The running test's file, describe blocks and title, from jest-circus's state. */
function currentTest(expect: JestGlobals["expect"]): { file: string; titles: string[] } {
  // jest-circus keeps its state under a symbol of its own (not a registered one): found by name.
  const circus = Object.getOwnPropertySymbols(globalThis).find((s) => s.description === CIRCUS);
  const state = circus && (globalThis as Record<symbol, CircusState | undefined>)[circus];
  const titles: string[] = [];
  for (let block = state?.currentlyRunningTest; block && block.name !== ROOT; block = block.parent) {
    titles.unshift(distinctTitle(block, block.parent?.children ?? [block]));
  }
  const expectState = expect?.getState?.() ?? {};
  if (!titles.length) titles.push(expectState.currentTestName ?? "test");
  return { file: expectState.testPath ?? "unknown", titles };
}

/** jest's hooks: its globals, or, with `injectGlobals: false`, `@jest/globals`, which the
 * CommonJS build asks of jest's module registry (an ES module cannot, synchronously). */
function jestGlobals(): JestGlobals {
  const injected = globalThis as Partial<JestGlobals>;
  if (typeof injected.beforeAll === "function") return injected as JestGlobals;
  if (typeof require === "function") return require("@jest/globals") as JestGlobals;
  throw failure(
    "tapeproxy: jest's globals are off (injectGlobals: false): load tapeproxy/jest with " +
      "require() (its CommonJS build takes them from @jest/globals), or turn them on",
  );
}
