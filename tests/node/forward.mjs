// The official openai npm package with no baseURL (api.openai.com), through the proxy that
// `tapeproxy run` puts in HTTPS_PROXY. Node 20's fetch reads no proxy variable: undici's
// EnvHttpProxyAgent does (Node 22.21+ and 24 read them themselves with NODE_USE_ENV_PROXY=1).
// The run's CA comes from NODE_EXTRA_CA_CERTS. Prints the SDK's parsed answer as JSON.
import OpenAI from "openai";
import { EnvHttpProxyAgent, fetch } from "undici";

const dispatcher = new EnvHttpProxyAgent();
const client = new OpenAI({
  apiKey: "sk-test-node-fake",
  maxRetries: 0,
  fetch: (url, init) => fetch(url, { ...init, dispatcher }),
});
const chat = await client.chat.completions.create({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: "What is the capital of France?" }],
});
console.log(JSON.stringify(chat));
