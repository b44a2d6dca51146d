// The Vercel AI SDK (`ai` with `@ai-sdk/openai`): generateText and streamText. Its ready-made
// `openai` provider reads OPENAI_BASE_URL as it is imported, before any test: make one with
// createOpenAI() inside the test.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";
import { expect, test } from "vitest";
import { useTapeproxy } from "tapeproxy/vitest";
import { report } from "./report.js";

const tape = useTapeproxy();

test("generateText", async () => {
  report(tape);
  const openai = createOpenAI();
  const result = await generateText({
    model: openai.chat("gpt-4o-mini"),
    prompt: "Name a French city.",
    maxRetries: 0,
  });
  expect(result.text).toBe("echo: Name a French city.");
});

test("streamText", async () => {
  report(tape);
  const openai = createOpenAI();
  const result = streamText({
    model: openai.chat("gpt-4o-mini"),
    prompt: "Name a German city.",
    maxRetries: 0,
  });
  let text = "";
  for await (const part of result.textStream) text += part;
  expect(text).toBe("echo: Name a German city.");
});
