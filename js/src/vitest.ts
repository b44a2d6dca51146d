// tapeproxy for vitest: `useTapeproxy()` at the top of a test file or in a setup file.
import { afterEach, beforeAll, beforeEach } from "vitest";
import type { RunnerTask as Task } from "vitest";
import { distinctTitle } from "./naming.js";
import { failure, type Server } from "./server.js";
import { CONCURRENT, Tapeproxy, type TapeproxyOptions } from "./tape.js";

export { Tapeproxy, type Mode, type TapeproxyOptions } from "./tape.js";

// The worker's server, kept on the worker's global: a worker that runs several files (vitest's
// `isolate: false`) starts one. The worker's end closes its pipe, and so stops it.
const WORKER = Symbol.for("tapeproxy.worker");
const worker = ((globalThis as Record<symbol, unknown>)[WORKER] ??= {}) as { server?: Promise<Server> };

/** Run each test of this file (or of every file, from a setup file) against the worker's
 * tapeproxy server, with its own cassette; a test whose requests missed it fails. */
export function useTapeproxy(options?: TapeproxyOptions): Tapeproxy {
  const tape = new Tapeproxy(options);
  beforeAll(() => tape.attach(worker), 90_000);
  beforeEach(async ({ task }) => {
    if (task.concurrent) throw failure(CONCURRENT);
    const titles: string[] = [];
    for (let node: Task | undefined = task; node && node !== task.file; node = node.suite) {
      titles.unshift(distinctTitle(node, (node.suite ?? task.file).tasks));
    }
    await tape.begin({ file: task.file.filepath, titles });
  });
  afterEach(async () => {
    const report = await tape.end();
    if (report) throw failure(report);
  });
  return tape;
}
