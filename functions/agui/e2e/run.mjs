// The AG-UI door's acceptance test with the official AG-UI TypeScript
// client. functions/agui/e2e_test.go starts a broker node, the door and a Go
// provider, then runs `node run.mjs` with:
//
//   FUNDUQ_DOOR      the door's base URL (http://127.0.0.1:port)
//   FUNDUQ_PROVIDER  the Go SDK provider's public key (agents echo, slow)
//   FUNDUQ_ASKER     the key of the provider serving "ask" (pauses, then answers)
//   FUNDUQ_OFFLINE   the key of a provider whose agent "gone" is unserved
//
// Every stream goes through HttpAgent.runAgent, whose default pipeline
// verifies the event sequence (verifyEvents): a stream that does not start
// with RUN_STARTED, or breaks AG-UI's ordering rules, rejects the run.
// The script prints one JSON line (the facts the Go test checks again) and
// exits 0, or prints the failure and exits 1.
import { HttpAgent } from "@ag-ui/client";

const door = process.env.FUNDUQ_DOOR;
const key = process.env.FUNDUQ_PROVIDER;
const offline = process.env.FUNDUQ_OFFLINE;
const asker = process.env.FUNDUQ_ASKER;
if (!door || !key || !offline || !asker) {
  throw new Error("FUNDUQ_DOOR, FUNDUQ_PROVIDER, FUNDUQ_ASKER and FUNDUQ_OFFLINE are required");
}

function assert(cond, what, detail) {
  if (!cond) {
    throw new Error(`assertion failed: ${what}${detail === undefined ? "" : `: ${JSON.stringify(detail)}`}`);
  }
}

// run runs one turn and returns the events the client applied (verified).
async function run(agent, params = {}) {
  const events = [];
  let error;
  try {
    await agent.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
  } catch (e) {
    error = e;
  }
  return { events, types: events.map((e) => e.type), error };
}

function userMessage(id, content) {
  return { id, role: "user", content };
}

function lastAssistantText(agent) {
  const m = agent.messages.filter((m) => m.role === "assistant").at(-1);
  return m ? m.content : undefined;
}

// ReplayAgent reads GET /runs/{id}/events from after a Last-Event-ID — the
// reconnect a client makes after its stream was cut — through the same
// HttpAgent pipeline and verification.
class ReplayAgent extends HttpAgent {
  constructor(config, lastEventId) {
    super(config);
    this.lastEventId = lastEventId;
  }
  requestInit() {
    return {
      method: "GET",
      headers: { Accept: "text/event-stream", "Last-Event-ID": String(this.lastEventId) },
      signal: this.abortController.signal,
    };
  }
}

const report = {};
const text = ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"];

// 1. A full turn, then a second turn on funduq's thread.
{
  const agent = new HttpAgent({ url: `${door}/agui/${key}/echo`, threadId: "thread-the-caller-invented" });
  agent.addMessage(userMessage("u1", "hello"));
  const r = await run(agent);
  assert(!r.error, "full turn ran", String(r.error));
  assert(JSON.stringify(r.types) === JSON.stringify(text), "full turn events", r.types);
  const started = r.events[0];
  assert(started.threadId.startsWith("thread_") && started.threadId !== "thread-the-caller-invented",
    "funduq's thread id, not the caller's", started.threadId);
  assert(lastAssistantText(agent) === "echo: hello", "assistant text", agent.messages);
  report.fullTurn = { threadId: started.threadId, runId: started.runId };

  agent.threadId = started.threadId; // continuing means using funduq's id
  agent.addMessage(userMessage("u2", "again"));
  const r2 = await run(agent);
  assert(!r2.error, "second turn ran", String(r2.error));
  assert(r2.events[0].threadId === started.threadId && r2.events[0].runId !== started.runId, "second turn on the same thread", r2.events[0]);
  assert(lastAssistantText(agent) === "echo: again", "second assistant text", agent.messages);
  report.secondTurn = { runId: r2.events[0].runId };
}

// 2. A reconnect with Last-Event-ID: 1 (after RUN_STARTED): the door puts a
// RUN_STARTED first and the rest follows, verified by the client.
{
  const { runId, threadId } = report.fullTurn;
  const agent = new ReplayAgent({ url: `${door}/runs/${runId}/events`, threadId }, 1);
  const r = await run(agent);
  assert(!r.error, "replay ran", String(r.error));
  assert(JSON.stringify(r.types) === JSON.stringify(text), "replay events", r.types);
  assert(r.events[0].runId === runId && r.events[0].threadId === threadId, "synthesized RUN_STARTED names the run", r.events[0]);
  assert(lastAssistantText(agent) === "echo: hello", "replayed assistant text", agent.messages);
  report.reconnect = { types: r.types };
}

// 3. An offline agent: RUN_STARTED then RUN_ERROR, at once.
{
  const agent = new HttpAgent({ url: `${door}/agui/${offline}/gone` });
  agent.addMessage(userMessage("u1", "anyone?"));
  const r = await run(agent);
  assert(JSON.stringify(r.types) === JSON.stringify(["RUN_STARTED", "RUN_ERROR"]), "offline events", { types: r.types, error: String(r.error) });
  assert(r.events[1].code === "agent_offline" && r.events[1].message !== "", "offline reason", r.events[1]);
  report.offline = { runId: r.events[0].runId, types: r.types };
}

// 4. An interrupt, then the resume: the same run id carries on.
{
  const agent = new HttpAgent({ url: `${door}/agui/${asker}/ask` });
  agent.addMessage(userMessage("u1", "delete everything"));
  const r = await run(agent);
  assert(!r.error, "asking run ran", String(r.error));
  assert(JSON.stringify(r.types) === JSON.stringify(["RUN_STARTED", "RUN_FINISHED"]), "asking events", r.types);
  assert(r.events[1].outcome?.type === "interrupt", "interrupt outcome", r.events[1]);
  assert(agent.pendingInterrupts.length === 1 && agent.pendingInterrupts[0].id === "approve-1", "pending interrupt", agent.pendingInterrupts);
  agent.threadId = r.events[0].threadId;
  const r2 = await run(agent, { resume: [{ interruptId: "approve-1", status: "resolved", payload: { approved: true } }] });
  assert(!r2.error, "resumed run ran", String(r2.error));
  assert(JSON.stringify(r2.types) === JSON.stringify(text), "resumed events", r2.types);
  assert(r2.events[0].runId === r.events[0].runId, "the resume keeps the run id", [r.events[0].runId, r2.events[0].runId]);
  assert(lastAssistantText(agent) === "approved", "resumed answer", agent.messages);
  assert(agent.pendingInterrupts.length === 0, "interrupt resolved", agent.pendingInterrupts);
  report.resume = { runId: r.events[0].runId, threadId: r.events[0].threadId };
}

// 5. A second run on a busy thread is queued behind the first; both streams
// complete, each verified.
{
  const first = new HttpAgent({ url: `${door}/agui/${key}/slow` });
  first.addMessage(userMessage("u1", "one"));
  let threadOf;
  const gotThread = new Promise((resolve) => { threadOf = resolve; });
  const events1 = [];
  const p1 = first.runAgent({}, {
    onEvent: ({ event }) => {
      events1.push(event);
      if (event.type === "RUN_STARTED") threadOf(event.threadId);
    },
  });
  const thread = await gotThread;
  const second = new HttpAgent({ url: `${door}/agui/${key}/slow`, threadId: thread });
  second.addMessage(userMessage("u2", "two"));
  const r2 = await run(second);
  await p1;
  assert(!r2.error, "queued run ran", String(r2.error));
  assert(JSON.stringify(events1.map((e) => e.type)) === JSON.stringify(text), "first slow run events", events1.map((e) => e.type));
  assert(JSON.stringify(r2.types) === JSON.stringify(text), "queued run events", r2.types);
  assert(r2.events[0].threadId === thread && r2.events[0].runId !== events1[0].runId, "same thread, another run", r2.events[0]);
  assert(lastAssistantText(first) === "slow: one" && lastAssistantText(second) === "slow: two", "slow answers",
    [lastAssistantText(first), lastAssistantText(second)]);
  report.queued = { threadId: thread, first: events1[0].runId, second: r2.events[0].runId };
}

console.log(JSON.stringify(report));
