// Anthropic's TypeScript SDK (@anthropic-ai/sdk) against the gateway's /v1/messages, run by
// tests/test_anthropic_clients.py: node anthropic_sdk_check.mjs <node_modules> <gateway URL>.
// Prints one JSON object of what each call got; the test asserts on it.
import { createRequire } from "node:module";
import path from "node:path";

const [modules, baseURL] = process.argv.slice(2);
const require = createRequire(path.join(modules, "noop.js"));
const Anthropic = require("@anthropic-ai/sdk").default ?? require("@anthropic-ai/sdk");

const client = new Anthropic({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 20000 });
const weather = {
  name: "get_weather",
  description: "The weather in a city.",
  input_schema: { type: "object", properties: { city: { type: "string" } } },
};
const call = '[[*: tool=get_weather; args={"city": "Paris"}]]';
const out = {};

const created = await client.messages.create({
  model: "claude-sonnet-4-5",
  max_tokens: 100,
  system: "Be brief.",
  messages: [{ role: "user", content: "Hello there" }],
});
out.create = { text: created.content[0].text, stop_reason: created.stop_reason, usage: created.usage };

const stream = client.messages.stream({
  model: "auto",
  max_tokens: 100,
  messages: [{ role: "user", content: "stream me" }],
});
let streamed = "";
stream.on("text", (t) => { streamed += t; });
const final = await stream.finalMessage();
out.stream = { text: streamed, final: final.content[0].text, stop_reason: final.stop_reason };

const tools = client.messages.stream({
  model: "auto",
  max_tokens: 100,
  tools: [weather],
  messages: [{ role: "user", content: `weather? ${call}` }],
});
const events = [];
for await (const ev of tools) events.push(ev.type);
const toolMsg = await tools.finalMessage();
const use = toolMsg.content.find((b) => b.type === "tool_use");
out.tool_stream = { events, stop_reason: toolMsg.stop_reason, name: use.name, input: use.input, id: use.id };

const answered = await client.messages.create({
  model: "auto",
  max_tokens: 100,
  tools: [weather],
  messages: [
    { role: "user", content: "weather?" },
    { role: "assistant", content: [{ type: "tool_use", id: use.id, name: use.name, input: use.input }] },
    {
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: use.id, content: "sunny" },
        { type: "text", text: "[[*: text=It is sunny.]]" },
      ],
    },
  ],
});
out.tool_result = { text: answered.content[0].text, stop_reason: answered.stop_reason };

const counted = await client.messages.countTokens({
  model: "auto",
  messages: [{ role: "user", content: "count these words please" }],
});
out.count_tokens = counted.input_tokens;

try {
  await client.messages.create({
    model: "auto",
    max_tokens: 10,
    messages: [{ role: "user", content: "[[highspeed: status=400]]" }],
  });
  out.error = "no error";
} catch (e) {
  out.error = {
    bad_request: e instanceof Anthropic.BadRequestError,
    status: e.status,
    type: e.error?.error?.type,
    message: e.error?.error?.message,
  };
}
try {
  await client.messages.create({
    model: "auto",
    max_tokens: 10,
    messages: [{ role: "user", content: "[[*: status=500]]" }],
  });
  out.server_error = "no error";
} catch (e) {
  out.server_error = { internal: e instanceof Anthropic.InternalServerError, status: e.status };
}
console.log(JSON.stringify(out));
