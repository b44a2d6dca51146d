// Streams one chat completion with the openai npm package and reports how far it got.
// Usage: node cut.mjs BASE_URL   (prints one JSON line: the chunks parsed, the error raised)
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "sk-test-node-fake", maxRetries: 0 });
const messages = [{ role: "user", content: "What is the capital of France?" }];

let chunks = 0;
let error = null;
try {
  const stream = await client.chat.completions.create({ model: "gpt-4o-mini", messages, stream: true });
  for await (const chunk of stream) {
    chunks += 1;
  }
} catch (exc) {
  error = `${exc.constructor.name}: ${exc.message}`;
}
console.log(JSON.stringify({ chunks, error }));
