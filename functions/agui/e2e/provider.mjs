// An agent provider written from the wire v4 description alone (the
// provider link's handshake, register, run, ack, event, finish and query
// frames), in another language than the broker and its Go SDK, run by
// functions/agui/nodeprovider_test.go. It behaves as the description allows
// and our SDK does not: it declares no capacity (maxConcurrentRuns null),
// pretty-prints its frames with its own key order, acks without "accepted"
// (which means accepted), sends no seq on its events, and writes the ack,
// a thread query, the events and the finish in one burst without waiting.
//
// Environment: FUNDUQ_BROKER (the broker node's base URL), FUNDUQ_SEED (the
// provider's Ed25519 seed, 64 hex), FUNDUQ_AGENT (the agent's name; a second
// agent, its name with "-refuser" added, refuses every run with a reason).
// It prints one JSON line per run it served or refused and exits 1 on
// anything the wire description says cannot happen.
import crypto from "node:crypto";

const broker = process.env.FUNDUQ_BROKER;
const agent = process.env.FUNDUQ_AGENT;
const seed = Buffer.from(process.env.FUNDUQ_SEED ?? "", "hex");
if (!broker || !agent || seed.length !== 32) {
  fail("FUNDUQ_BROKER, FUNDUQ_AGENT and a 32-byte FUNDUQ_SEED are required");
}

function fail(why) {
  process.stderr.write(JSON.stringify({ error: why }) + "\n");
  process.exit(1);
}

// An Ed25519 key from its raw seed: PKCS#8 is the seed behind a fixed prefix.
const priv = crypto.createPrivateKey({
  key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]),
  format: "der",
  type: "pkcs8",
});
const pubHex = Buffer.from(crypto.createPublicKey(priv).export({ format: "jwk" }).x, "base64url").toString("hex");
const sign = (text) => crypto.sign(null, Buffer.from(text, "utf8"), priv).toString("hex");
const verify = (keyHex, text, sigHex) => {
  const key = crypto.createPublicKey({
    key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(keyHex, "hex").toString("base64url") },
    format: "jwk",
  });
  return crypto.verify(null, Buffer.from(text, "utf8"), key, Buffer.from(sigHex, "hex"));
};

// Step 0: a ticket, out of band.
const tr = await fetch(broker + "/tickets", {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ publicKey: pubHex }),
});
if (tr.status !== 200 && tr.status !== 201) fail(`POST /tickets answered ${tr.status}`);
const { ticket, funduqPublicKey } = await tr.json();
if (typeof ticket !== "string" || !/^[0-9a-f]{64}$/.test(funduqPublicKey ?? "")) {
  fail("the ticket answer lacks a ticket or funduq's key");
}

const nonce = crypto.randomBytes(16).toString("hex");
const ws = new WebSocket(broker.replace(/^http/, "ws") + "/ws/provider");
// Pretty-printed, keys in this program's own order: JSON is JSON.
const send = (frame) => ws.send(JSON.stringify(frame, null, 2));

const inbox = [];
let waiting = null;
ws.onmessage = (m) => {
  if (typeof m.data !== "string") fail("funduq sent a binary message");
  let f;
  try {
    f = JSON.parse(m.data);
  } catch {
    fail("funduq sent a frame that is not JSON: " + m.data);
  }
  if (waiting) {
    const w = waiting;
    waiting = null;
    w(f);
  } else inbox.push(f);
};
ws.onclose = (e) => {
  if (!closing) fail(`funduq closed the link: ${e.code} ${e.reason}`);
};
const next = () => (inbox.length ? Promise.resolve(inbox.shift()) : new Promise((r) => (waiting = r)));
let closing = false;
process.on("SIGTERM", () => {
  closing = true;
  ws.close(1000, "done");
  process.exit(0);
});

await new Promise((r, j) => {
  ws.onopen = r;
  ws.onerror = () => j(new Error("the link did not open"));
}).catch((e) => fail(e.message));

// Step 1 and 2: hello, welcome.
send({
  maxConcurrentRuns: null,
  proof: sign(`funduq-connect-provider:${funduqPublicKey}:${ticket}:${nonce}`),
  nonce,
  ticket,
  publicKey: pubHex,
  version: 4,
  type: "hello",
});
const welcome = await next();
if (welcome.type !== "welcome" || welcome.funduqPublicKey !== funduqPublicKey) {
  fail("the first frame is not funduq's welcome: " + JSON.stringify(welcome));
}
if (!verify(funduqPublicKey, `funduq-connect-funduq:${ticket}:${nonce}`, welcome.answer)) {
  fail("funduq's answer does not verify");
}

// The full roster; exactly one frame answers it, and it must be registered.
send({
  providerName: "node provider",
  agents: [
    {
      takesInterjections: false,
      metadata: { runtime: "node" },
      agentCardExtra: { skills: [{ id: "echo", name: "echo", description: "echoes", tags: [] }] },
      description: "An echo written from the wire description",
      name: agent,
    },
    { name: agent + "-refuser" },
  ],
  type: "register",
});
const registered = await next();
if (registered.type !== "registered" || JSON.stringify(registered.names) !== JSON.stringify([agent, agent + "-refuser"])) {
  fail("register was answered with " + JSON.stringify(registered));
}

// A run frame carries exactly its five keys and its type; an envelope with
// any other key is refused by strict providers (extra=forbid).
const envelope = ["agentName", "metadata", "runId", "runInput", "threadId", "type"];
const queries = new Map();
for (;;) {
  const f = await next();
  if (f.type === "queryResult") {
    const q = queries.get(f.queryId);
    if (!q) fail("a queryResult for no query of mine: " + JSON.stringify(f));
    queries.delete(f.queryId);
    q(f);
    continue;
  }
  if (f.type !== "run") fail("funduq sent an unexpected frame: " + JSON.stringify(f));
  const keys = Object.keys(f).sort();
  if (JSON.stringify(keys) !== JSON.stringify(envelope)) fail("the run frame's keys are " + keys.join(","));
  const input = f.runInput;
  if (input.runId !== f.runId || input.threadId !== f.threadId) {
    fail("the run frame disagrees with its input: " + JSON.stringify(f));
  }
  if (f.agentName === agent + "-refuser") {
    // A refusal: not accepted, with a reason, which funduq keeps verbatim.
    send({ reason: "node refuses: not today", accepted: false, runId: f.runId, type: "ack" });
    process.stdout.write(JSON.stringify({ runId: f.runId, threadId: f.threadId, refused: true }) + "\n");
    continue;
  }
  if (f.agentName !== agent) fail("offered a run of an agent I do not serve: " + f.agentName);
  const last = [...input.messages].reverse().find((m) => m.role === "user");
  const text = typeof last?.content === "string" ? last.content : "";
  const reply = `${f.runId}-reply`;
  const query = (limit) => {
    const queryId = crypto.randomBytes(8).toString("hex");
    const answered = new Promise((r) => queries.set(queryId, r));
    send({ params: { limit, threadId: f.threadId }, method: "thread_messages", queryId, type: "query" });
    return answered;
  };
  // One burst: the verdict, a query and every report, written back to back.
  send({ runId: f.runId, type: "ack" });
  const answered = Promise.all([query(10), query(1)]);
  const ev = (event) => send({ event, runId: f.runId, type: "event" });
  ev({ runId: f.runId, threadId: f.threadId, type: "RUN_STARTED" });
  ev({ role: "assistant", messageId: reply, type: "TEXT_MESSAGE_START" });
  ev({ delta: `node heard «${text}» ✓ 你好`, messageId: reply, type: "TEXT_MESSAGE_CONTENT" });
  ev({ messageId: reply, type: "TEXT_MESSAGE_END" });
  ev({ note: "an event type funduq does not know", type: "x-node-note" });
  ev({ runId: f.runId, threadId: f.threadId, type: "RUN_FINISHED" });
  send({ runId: f.runId, type: "finish" });
  // The answer comes through this loop; the run's line is printed then.
  answered.then(([all, one]) => {
    for (const q of [all, one]) if (q.error !== undefined) fail("the thread query was refused: " + q.error);
    process.stdout.write(
      JSON.stringify({ runId: f.runId, threadId: f.threadId, text, thread: all.result, last: one.result }) + "\n",
    );
  });
}
