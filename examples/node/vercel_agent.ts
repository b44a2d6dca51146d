// The same weather agent on the Vercel AI SDK (`ai` with `@ai-sdk/openai`): generateText runs
// the model's tool calls until it answers. It knows nothing of tapeproxy: point OPENAI_BASE_URL
// at it.
//   tapeproxy serve --cassette examples/vercel-agent         # replays the committed cassette
//   cd examples/node && npm ci
//   OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1 OPENAI_API_KEY=sk-any node --import tsx vercel_agent.ts
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL });

const getWeather = tool({
  description: "Today's weather in a city.",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, forecast: "sunny", celsius: 21 }),
});

const result = await generateText({
  model: openai.chat("gpt-4o-mini"),
  tools: { get_weather: getWeather },
  stopWhen: stepCountIs(5),
  maxRetries: 0,
  prompt: "What is the weather in Paris today?",
});
console.log(result.text);
