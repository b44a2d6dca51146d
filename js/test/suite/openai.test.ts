// The openai package against the worker's tapeproxy: a chat and a stream, each test with its
// own cassette. The client is made inside the test, when OPENAI_BASE_URL points at tapeproxy.
import OpenAI from "openai";
import { describe, expect, test } from "vitest";
import { useTapeproxy } from "tapeproxy/vitest";
import { report } from "./report.js";

const tape = useTapeproxy();
const messages = [{ role: "user" as const, content: "What is the capital of France?" }];

describe("openai", () => {
  test("answers a chat", async () => {
    report(tape);
    const client = new OpenAI({ maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: "gpt-4o-mini", messages });
    expect(chat.choices[0]!.message.content).toBe("echo: What is the capital of France?");
  });

  test("streams a chat", async () => {
    report(tape);
    const client = new OpenAI({ maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      usage ??= chunk.usage;
    }
    expect(text).toBe("echo: What is the capital of France?");
    expect(usage?.total_tokens).toBeGreaterThan(0);
  });
});

// A client made once for the file reads the environment too early: a factory that makes it
// when a test calls it (or `baseURL: process.env.OPENAI_BASE_URL` read in the test) does not.
const client = () => new OpenAI({ maxRetries: 0 });

test("a client made lazily by a factory reaches tapeproxy", async () => {
  report(tape);
  expect(process.env.OPENAI_BASE_URL).toBe(tape.baseUrl("openai"));
  const chat = await client().chat.completions.create({ model: "gpt-4o-mini", messages });
  expect(chat.choices[0]!.message.content).toBe("echo: What is the capital of France?");
});
