// A text turn and an audio turn with the openai npm package's Realtime client (on `ws`),
// the same client events tests/e2e/test_realtime_sdk.py's Python agent sends.
// Usage: node realtime.mjs BASE_URL PROMPT   (prints one JSON line: every server event)
import net from "node:net";
import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";

const [baseURL, prompt] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-test-node-fake" });
// The package always opens wss://; tapeproxy serves plain ws:// on loopback, so the socket
// under it is a plain TCP one (ws's createConnection option).
const plain = (options) => net.connect(options.port, options.host);
const rt = await OpenAIRealtimeWS.create(client, {
  model: "gpt-realtime",
  options: { createConnection: plain },
});
const events = [];
const modalities = ["text", "audio"];

function ask(modality) {
  rt.send({
    type: "conversation.item.create",
    item: { type: "message", role: "user", content: [{ type: "input_text", text: `${prompt} (${modality})` }] },
  });
  rt.send({ type: "response.create", response: { output_modalities: [modality] } });
}

const done = new Promise((resolve) => {
  rt.on("event", (event) => {
    events.push(event);
    if (event.type === "response.done") {
      modalities.shift();
      if (modalities.length) ask(modalities[0]);
      else resolve();
    }
  });
  rt.on("error", () => resolve());
  rt.socket.on("close", () => resolve());
});
rt.socket.on("open", () => {
  rt.send({ type: "session.update", session: { type: "realtime", instructions: prompt } });
  ask(modalities[0]);
});
await done;
rt.close();
console.log(JSON.stringify(events));
