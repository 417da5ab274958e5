// The KYOK door's acceptance test with the official OpenAI Node client
// (openai). functions/kyok/e2e_node_test.go starts a broker node, the door
// and a scripted LLM provider serving "gpt-4", starts a run bound to it, and
// runs `node run.mjs` with:
//
//   FUNDUQ_KYOK   the door's OpenAI base URL (http://127.0.0.1:port/kyok/v1)
//   FUNDUQ_TOKEN  the run's KYOK token (the client's API key)
//   FUNDUQ_SEED   the agent provider's Ed25519 seed (64 hex), which signs
//                 every call the way an agent's SDK does
//
// The scripted LLM answers model "gpt-4" with "Hel" "lo, " "world" (finish
// "stop", usage 3+3 as a last choiceless chunk), "gpt-4-refuse" with the
// model's refusal (delta.refusal), "gpt-4-tools" with two tool calls
// (get_weather and get_time) streamed in pieces and finish "tool_calls",
// "gpt-4-cut" with one chunk then an
// unstructured failure, and any other model with a structured refusal
// {"code":"model_not_found", …}.
//
// Every assertion is on what the client hands its caller: the typed
// objects, their fields, the typed errors. The script prints one JSON line
// (the facts the Go test checks again) and exits 0, or prints the failure
// and exits 1.
import { createHash, createPrivateKey, sign } from "node:crypto";
import OpenAI from "openai";
import { Stream } from "openai/streaming";

const baseURL = process.env.FUNDUQ_KYOK;
const token = process.env.FUNDUQ_TOKEN;
const seed = process.env.FUNDUQ_SEED;
if (!baseURL || !token || !seed) {
  throw new Error("FUNDUQ_KYOK, FUNDUQ_TOKEN and FUNDUQ_SEED are required");
}

function assert(cond, what, detail) {
  if (!cond) {
    throw new Error(`assertion failed: ${what}${detail === undefined ? "" : `: ${JSON.stringify(detail)}`}`);
  }
}

// The agent provider's key: an Ed25519 private key from its 32-byte seed
// (PKCS#8 DER, RFC 8410).
const key = createPrivateKey({
  key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), Buffer.from(seed, "hex")]),
  format: "der",
  type: "pkcs8",
});

// signingFetch signs each attempt as the KYOK door requires: a timestamp
// and an Ed25519 signature over funduq-kyok-call:{token}:{ts}:{sha256hex(body)},
// the token being the one this request carries as its bearer and the body
// the exact bytes sent.
function signingFetch(url, init = {}) {
  const headers = new Headers(init.headers);
  const bearer = (headers.get("authorization") ?? "").replace(/^Bearer /i, "");
  const body = init.body === undefined || init.body === null ? Buffer.alloc(0) : Buffer.from(init.body);
  const ts = Math.floor(Date.now() / 1000);
  const payload = `funduq-kyok-call:${bearer}:${ts}:${createHash("sha256").update(body).digest("hex")}`;
  headers.set("X-Souk-Kyok-Timestamp", String(ts));
  headers.set("X-Souk-Kyok-Signature", sign(null, Buffer.from(payload), key).toString("hex"));
  return fetch(url, { ...init, headers });
}

// client is how an agent points the official client at the door: its
// defaults (retries included), the token as API key, signing fetch.
function client(apiKey = token, opts = {}) {
  return new OpenAI({ baseURL, apiKey, fetch: signingFetch, ...opts });
}

const messages = [{ role: "user", content: "hi" }];
const report = {};

async function rejection(p) {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("assertion failed: the call succeeded, want an error");
}

// 1. A non-streaming completion: one chat.completion, the chunks collapsed.
{
  const { data: c, response } = await client().chat.completions.create({ model: "gpt-4", messages }).withResponse();
  assert(response.status === 200, "non-streaming status", response.status);
  assert(c.object === "chat.completion", "object", c);
  assert(typeof c.id === "string" && c.id === "chatcmpl-1", "id", c);
  assert(c.model === "gpt-4", "model", c);
  assert(Number.isInteger(c.created) && c.created === 1755300000, "created", c);
  assert(Array.isArray(c.choices) && c.choices.length === 1, "one choice", c);
  const [ch] = c.choices;
  assert(ch.index === 0, "choice index", ch);
  assert(ch.finish_reason === "stop", "finish_reason", ch);
  assert(ch.message.role === "assistant", "role", ch);
  assert(ch.message.content === "Hello, world", "content", ch);
  // ChatCompletionMessage.refusal is `string | null` (required): null
  // when the model did not refuse. Recorded, not asserted: the Go test
  // reads it (the collapse omits it today).
  report.refusalMember = "refusal" in ch.message ? ch.message.refusal : "absent";
  assert(c.usage && c.usage.prompt_tokens === 3 && c.usage.completion_tokens === 3 && c.usage.total_tokens === 6, "usage", c.usage);
  report.collapsed = { id: c.id, content: ch.message.content, requestId: response.headers.get("x-request-id") };
}

// 2. A streaming completion: a Stream of chat.completion.chunk, the text in
// order, the final finish_reason, then the usage chunk (include_usage).
{
  const stream = await client().chat.completions.create({
    model: "gpt-4", messages, stream: true, stream_options: { include_usage: true },
  });
  assert(stream instanceof Stream, "create({stream: true}) returns a Stream");
  const parts = [];
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert(chunk.object === "chat.completion.chunk" && chunk.id === "chatcmpl-1" && chunk.model === "gpt-4", "chunk", chunk);
    assert(Array.isArray(chunk.choices), "chunk.choices is an array", chunk);
    for (const c of chunk.choices) {
      assert(c.index === 0 && typeof c.delta === "object", "chunk choice", c);
      if (typeof c.delta.content === "string") parts.push(c.delta.content);
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert(JSON.stringify(parts) === JSON.stringify(["Hel", "lo, ", "world"]), "streamed text", parts);
  assert(finish === "stop", "final finish_reason", finish);
  assert(usage && usage.total_tokens === 6, "usage chunk", usage);
  report.streamed = { chunks, text: parts.join(""), finish, usage };
}

// 2b. The same through the client's own accumulator
// (chat.completions.stream → finalChatCompletion).
{
  const runner = client().chat.completions.stream({ model: "gpt-4", messages, stream_options: { include_usage: true } });
  const deltas = [];
  runner.on("content", (delta) => deltas.push(delta));
  const c = await runner.finalChatCompletion();
  assert(c.choices[0].message.content === "Hello, world" && c.choices[0].finish_reason === "stop", "accumulated completion", c);
  assert(deltas.join("") === "Hello, world", "content events", deltas);
  assert(c.usage && c.usage.total_tokens === 6, "accumulated usage", c.usage);
  report.accumulated = { content: c.choices[0].message.content };
}

// 2c. The model refuses (delta.refusal, as OpenAI streams a refusal):
// the streamed refusal text, and what the collapsed answer makes of it —
// recorded for the Go test.
{
  const stream = await client().chat.completions.create({ model: "gpt-4-refuse", messages, stream: true });
  let streamed = "";
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.refusal ?? "";
  assert(streamed === "I can't help with that.", "streamed refusal", streamed);
  const c = await client().chat.completions.create({ model: "gpt-4-refuse", messages });
  const m = c.choices[0].message;
  report.modelRefusal = { streamed, collapsed: "refusal" in m ? m.refusal : "absent", collapsedContent: m.content };
}

// 2d. Function calling: the LLM provider streams two tool calls in pieces
// (each call's first delta with index, id, type, name and the start of its
// arguments, the later ones with the index and more arguments), finishing
// "tool_calls". What the client hands back — the door's collapsed answer,
// and the client's stream helper accumulating the chunks — is recorded
// for the Go test, which checks both against the calls sent.
{
  const tools = [
    { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } } } } },
    { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { tz: { type: "string" } } } } },
  ];
  const args = (s) => {
    try {
      return JSON.parse(s);
    } catch {
      return s; // not JSON: reported as sent
    }
  };
  const calls = (m) => (m.tool_calls ?? []).map((tc) => ({ id: tc.id, type: tc.type, name: tc.function?.name, arguments: args(tc.function?.arguments) }));
  const answer = (ch) => ({
    finish: ch.finish_reason,
    refusal: "refusal" in ch.message ? ch.message.refusal : "absent",
    content: "content" in ch.message ? ch.message.content : "absent",
    calls: calls(ch.message),
  });

  const c = await client().chat.completions.create({ model: "gpt-4-tools", messages, tools });
  assert(c.object === "chat.completion" && c.id === "chatcmpl-3" && c.choices.length === 1, "tool calls: one collapsed completion", c);
  const collapsed = answer(c.choices[0]);

  const runner = client().chat.completions.stream({ model: "gpt-4-tools", messages, tools });
  const argumentsDone = [];
  runner.on("tool_calls.function.arguments.done", (e) => argumentsDone.push({ name: e.name, arguments: args(e.arguments) }));
  const f = await runner.finalChatCompletion();
  assert(f.id === "chatcmpl-3" && f.choices.length === 1, "tool calls: one accumulated completion", f);
  report.toolCalls = { collapsed, accumulated: { ...answer(f.choices[0]), argumentsDone } };
}

// 3. A refused call: a bad token is the client's AuthenticationError,
// status 401, the door's error body readable through it.
{
  const e = await rejection(client(token + "0").chat.completions.create({ model: "gpt-4", messages }));
  assert(e instanceof OpenAI.AuthenticationError, "bad token: AuthenticationError", { name: e.constructor.name, message: e.message });
  assert(e instanceof OpenAI.APIError && e.status === 401, "bad token: status 401", e.status);
  assert(e.code === "invalid_token" && e.type === "invalid_token", "bad token: code and type", { code: e.code, type: e.type });
  assert(e.error && e.error.message === "invalid or expired KYOK token", "bad token: error body", e.error);
  assert(e.message === "401 invalid or expired KYOK token", "bad token: message", e.message);
  report.badToken = { status: e.status, code: e.code, message: e.message };
}

// 4. An unknown model: the LLM provider's structured refusal, the door's
// status (502 llm_refused) on the client's typed error, the refusal
// readable as error.refusal — streaming or not. The client's default
// retries must not send a definitive refusal again.
{
  const e = await rejection(client().chat.completions.create({ model: "gpt-nope", messages }));
  assert(e instanceof OpenAI.InternalServerError && e.status === 502, "unknown model: InternalServerError 502", { name: e.constructor.name, status: e.status, message: e.message });
  assert(e.code === "llm_refused", "unknown model: code", e.error);
  assert(e.error.refusal && e.error.refusal.code === "model_not_found", "unknown model: refusal", e.error);
  const s = await rejection(client().chat.completions.create({ model: "gpt-nope", messages, stream: true }));
  assert(s instanceof OpenAI.InternalServerError && s.status === 502 && s.code === "llm_refused", "unknown model streamed: 502 before the stream", { name: s.constructor.name, status: s.status, message: s.message });
  report.unknownModel = { status: e.status, code: e.code, refusal: e.error.refusal };
}

// 5. A failure mid-stream: the chunks before it, then the client's APIError
// carrying the door's final error object (no status: the stream was 200).
{
  const stream = await client().chat.completions.create({ model: "gpt-4-cut", messages, stream: true });
  const parts = [];
  const e = await rejection((async () => {
    for await (const chunk of stream) parts.push(chunk.choices[0]?.delta?.content);
  })());
  assert(JSON.stringify(parts) === JSON.stringify(["par"]), "chunks before the failure", parts);
  assert(e instanceof OpenAI.APIError && e.status === undefined, "mid-stream: APIError", { name: e.constructor.name, status: e.status });
  assert(e.type === "funduq_relay_failed" && e.error.message === "upstream 500", "mid-stream: error body", e.error);
  report.midStream = { message: e.message };
}

console.log(JSON.stringify(report));
