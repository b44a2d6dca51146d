// Drives tapeproxy with the official openai npm package: one chat completion, one streamed.
// Usage: node chat.mjs BASE_URL   (prints one JSON line with what the SDK parsed)
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "sk-test-node-fake", maxRetries: 0 });
const messages = [{ role: "user", content: "What is the capital of France?" }];

const chat = await client.chat.completions.create({ model: "gpt-4o-mini", messages });
const stream = await client.chat.completions.create({
  model: "gpt-4o-mini",
  messages,
  stream: true,
  stream_options: { include_usage: true },
});
const deltas = [];
let usage = null;
for await (const chunk of stream) {
  if (chunk.choices.length) deltas.push(chunk.choices[0].delta.content ?? "");
  if (chunk.usage) usage = chunk.usage;
}
console.log(JSON.stringify({ text: chat.choices[0].message.content, deltas, usage }));
