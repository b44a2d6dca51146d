// Faults per test: the file's (useTapeproxy's `faults`), and ones a test sets itself. A
// faulted request uses up no recording: the client's retry gets the recorded answer.
import OpenAI from "openai";
import { expect, test } from "vitest";
import { useTapeproxy } from "tapeproxy/vitest";
import { report } from "./report.js";

const tape = useTapeproxy({ faults: ["server_error@1"] });
const ask = { model: "gpt-4o-mini", messages: [{ role: "user" as const, content: "Retry me." }] };

test("the file's fault fails the first request; the second gets the answer", async () => {
  report(tape);
  const client = new OpenAI({ maxRetries: 0 });
  await expect(client.chat.completions.create(ask)).rejects.toMatchObject({ status: 500 });
  const chat = await client.chat.completions.create(ask);
  expect(chat.choices[0]!.message.content).toBe("echo: Retry me.");
});

test("a test sets its own faults", async () => {
  report(tape);
  await tape.faults(["rate_limit:retry_after=0@1"]);
  const client = new OpenAI({ maxRetries: 0 });
  await expect(client.chat.completions.create(ask)).rejects.toMatchObject({ status: 429 });
  const chat = await client.chat.completions.create(ask);
  expect(chat.choices[0]!.message.content).toBe("echo: Retry me.");
});
