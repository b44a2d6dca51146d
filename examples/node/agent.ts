// A weather agent on the openai npm package, in TypeScript: a tool-calling loop that runs the
// model's tool calls until it answers. It knows nothing of tapeproxy: point OPENAI_BASE_URL at it.
//   tapeproxy serve --cassette examples/node-agent           # replays the committed cassette
//   cd examples/node && npm ci
//   OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1 OPENAI_API_KEY=sk-any node --import tsx agent.ts
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";

const MODEL = "gpt-4o-mini";
const TOOLS: ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Today's weather in a city.",
      parameters: {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
      },
    },
  },
];

function getWeather(city: string): string {
  return JSON.stringify({ city, forecast: "sunny", celsius: 21 });
}

export async function run(question: string, client: OpenAI, maxSteps = 5): Promise<string> {
  const messages: ChatCompletionMessageParam[] = [{ role: "user", content: question }];
  for (let step = 0; step < maxSteps; step++) {
    const reply = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS });
    const message = reply.choices[0].message;
    const calls = (message.tool_calls ?? []).filter((call) => call.type === "function");
    if (calls.length === 0) return message.content ?? "";
    messages.push({
      role: "assistant",
      content: message.content,
      tool_calls: calls.map((call) => ({
        id: call.id,
        type: "function" as const,
        function: { name: call.function.name, arguments: call.function.arguments },
      })),
    });
    for (const call of calls) {
      const { city } = JSON.parse(call.function.arguments) as { city: string };
      messages.push({ role: "tool", tool_call_id: call.id, content: getWeather(city) });
    }
  }
  throw new Error(`no answer after ${maxSteps} steps`);
}

console.log(await run("What is the weather in Paris today?", new OpenAI({ maxRetries: 0 })));
