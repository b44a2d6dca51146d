// Polly.JS records what Node's http module sends to BASE (the fake upstream) and writes it as
// a HAR file under DIR: a HAR from a real writer for tests/e2e/test_har.py. Prints the answers.
import http from "node:http";

import NodeHttpAdapter from "@pollyjs/adapter-node-http";
import { Polly } from "@pollyjs/core";
import FSPersister from "@pollyjs/persister-fs";

Polly.register(NodeHttpAdapter);
Polly.register(FSPersister);

const [base, dir, key] = process.argv.slice(2);
const polly = new Polly("chat", {
  adapters: ["node-http"],
  persister: "fs",
  persisterOptions: { fs: { recordingsDir: dir } },
  mode: "record",
});

function post(path, body) {
  return new Promise((resolve, reject) => {
    const headers = { "content-type": "application/json", authorization: `Bearer ${key}` };
    const request = http.request(base + path, { method: "POST", headers }, (answer) => {
      let text = "";
      answer.setEncoding("utf8");
      answer.on("data", (chunk) => (text += chunk));
      answer.on("end", () => resolve(text));
    });
    request.on("error", reject);
    request.end(JSON.stringify(body));
  });
}

const messages = [{ role: "user", content: "What is the capital of France?" }];
const answers = [
  await post("/v1/chat/completions", { model: "gpt-4o-mini", messages }),
  await post("/v1/chat/completions", { model: "gpt-4o-mini", messages, stream: true }),
];
await polly.stop();
console.log(JSON.stringify(answers));
