// For the meta-tests (test/suite.test.ts): each test notes which worker ran it on which
// server and cassette, in a folder JS_SUITE_REPORT names. Nothing when it is unset.
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { threadId } from "node:worker_threads";
import type { Tapeproxy } from "tapeproxy/vitest";

export function report(tape: Tapeproxy): void {
  const folder = process.env.JS_SUITE_REPORT;
  if (!folder) return;
  const line = { worker: `${process.pid}/${threadId}`, url: tape.url, cassette: tape.cassette, mode: tape.mode };
  appendFileSync(join(folder, "tests.jsonl"), JSON.stringify(line) + "\n");
}
