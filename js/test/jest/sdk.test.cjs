// The openai package and @anthropic-ai/sdk under jest, each test on its own cassette.
const OpenAI = require("openai").default;
const Anthropic = require("@anthropic-ai/sdk").default;

const question = (content) => [{ role: "user", content }];

describe("openai", () => {
  test("answers a chat", async () => {
    const client = new OpenAI({ maxRetries: 0 });
    const chat = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: question("What is the capital of Portugal?"),
    });
    expect(chat.choices[0].message.content).toBe("echo: What is the capital of Portugal?");
    expect(globalThis.tape.cassette).toMatch(/^test\/jest\/sdk\.test\/openai\/answers_a_chat-/);
  });

  test("streams a chat", async () => {
    const client = new OpenAI({ maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: question("What is the capital of Greece?"),
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe("echo: What is the capital of Greece?");
  });
});

test("anthropic answers a message", async () => {
  const client = new Anthropic({ maxRetries: 0 });
  const message = await client.messages.create({
    model: "claude-haiku-4-5",
    max_tokens: 64,
    messages: question("What is the capital of Austria?"),
  });
  expect(message.content[0].text).toBe("echo: What is the capital of Austria?");
});

test("a fault set by the test, and the recorded answer on the retry", async () => {
  await globalThis.tape.faults(["server_error@1"]);
  const client = new OpenAI({ maxRetries: 0 });
  const ask = { model: "gpt-4o-mini", messages: question("Retry me.") };
  await expect(client.chat.completions.create(ask)).rejects.toMatchObject({ status: 500 });
  const chat = await client.chat.completions.create(ask);
  expect(chat.choices[0].message.content).toBe("echo: Retry me.");
});
