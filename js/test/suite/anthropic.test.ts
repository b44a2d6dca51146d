// @anthropic-ai/sdk: a message and a streamed one, through ANTHROPIC_BASE_URL.
import Anthropic from "@anthropic-ai/sdk";
import { expect, test } from "vitest";
import { useTapeproxy } from "tapeproxy/vitest";
import { report } from "./report.js";

const tape = useTapeproxy();
const ask = { model: "claude-haiku-4-5", max_tokens: 64 };

test("answers a message", async () => {
  report(tape);
  const client = new Anthropic({ maxRetries: 0 });
  const message = await client.messages.create({
    ...ask,
    messages: [{ role: "user", content: "What is the capital of Italy?" }],
  });
  expect(message.content[0]).toMatchObject({ type: "text", text: "echo: What is the capital of Italy?" });
});

test("streams a message", async () => {
  report(tape);
  const client = new Anthropic({ maxRetries: 0 });
  const stream = client.messages.stream({
    ...ask,
    messages: [{ role: "user", content: "What is the capital of Spain?" }],
  });
  let text = "";
  stream.on("text", (delta) => (text += delta));
  const final = await stream.finalMessage();
  expect(text).toBe("echo: What is the capital of Spain?");
  expect(final.stop_reason).toBe("end_turn");
});
