// A run's stream cut at the Lambda deadline as the official AG-UI client
// (@ag-ui/client HttpAgent, its default event verification on) sees it,
// run by functions/agui/lambda/outside_deadline_test.go through the Lambda
// entry. The Go side plays the agent: it starts the run and streams some
// text, then waits; the invocation ends a few seconds after the door's
// margin. What the client hands application code is printed ("SEEN ..."),
// then checked: runAgent does not report the run finished or failed (it
// goes on), and a CUSTOM event funduq.stream_ended, read through the
// client's own onCustomEvent, names the run and the Last-Event-ID to
// resume from (HttpAgent drops SSE ids and comments, so it is the one
// place an application learns them). The resume it names is made through
// the client's own reconnect seat (connect / connectAgent), after "REQ
// finish" has the agent end the run; the text is whole. FUNDUQ_CUT says
// where the cut falls: "between" messages, inside a text message
// ("message") or inside a tool call ("tool"). Cut inside, the resume
// sends again, without ids, the events that opened what is open, then the
// events after the Last-Event-ID (design.md §The doors, "A resume from
// inside a message"): this agent, which kept its state, must end with the
// message whole, once. A fresh agent (a reload: it holds only the user's
// message) resumed at the same id gets the part after the cut only, as
// documented; resumed from 0 it gets the message whole. Any failed check
// throws (non-zero exit); the last line is "DONE".
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { createInterface } from "node:readline";

const { FUNDUQ_DOOR: door, FUNDUQ_PROVIDER: key, FUNDUQ_CUT: cut = "between" } = process.env;
const check = (cond, what, got) => {
  if (!cond) throw new Error(`check failed: ${what}: ${JSON.stringify(got, null, 1)}`);
};
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const agentStep = async (step) => {
  process.stdout.write(`REQ ${step}\n`);
  const { value } = await lines.next();
  check(value?.startsWith("OK"), `agent step ${step}`, value);
};

// resumeFrom, when set, makes connect() a resume (the one the door named,
// or from 0): GET the run's events with Last-Event-ID (AG-UI's seat for
// reconnecting to a run; HttpAgent itself does not implement it).
let resumeFrom;
class ResumingAgent extends HttpAgent {
  connect() {
    const { path, lastEventId } = resumeFrom;
    return transformHttpEventStream(runHttpRequest(() => fetch(`${door}${path}`,
      { headers: { Accept: "text/event-stream", "Last-Event-ID": lastEventId } })));
  }
}

const agent = new ResumingAgent({ url: `${door}/agui/${key}/echo` });
agent.addMessage({ id: "u1", role: "user", content: "long job" });
const seen = { types: [], custom: [], finished: false, failed: null };
const subscriber = {
  onEvent: ({ event }) => { seen.types.push(event.type); },
  onCustomEvent: ({ event }) => { seen.custom.push({ name: event.name, value: event.value }); },
  onRunFinishedEvent: () => { seen.finished = true; },
  onRunFailed: ({ error }) => { seen.failed = String(error?.message ?? error); },
};
let outcome;
try {
  const r = await agent.runAgent({}, subscriber);
  outcome = { resolved: { newMessages: r.newMessages } };
} catch (e) {
  outcome = { threw: String(e?.message ?? e) };
}
process.stdout.write(`SEEN ${JSON.stringify({ ...seen, outcome, isRunning: agent.isRunning })}\n`);

const failures = [];
try {
  check(seen.types[0] === "RUN_STARTED" && !seen.finished && !seen.types.includes("RUN_ERROR") && seen.failed === null,
    "the cut stream reports the run neither finished nor failed", seen);
  const ended = seen.custom.find((c) => c.name === "funduq.stream_ended");
  check(ended !== undefined, "a CUSTOM funduq.stream_ended reaches onCustomEvent", seen);
  const runId = ended.value?.runId;
  check(typeof runId === "string" && runId !== "" && /^[0-9]+$/.test(ended.value?.lastEventId ?? "") &&
    ended.value?.resume === `GET /runs/${runId}/events`, "it names the run, the Last-Event-ID and the resume", ended);
  check(seen.types[seen.types.length - 1] === "CUSTOM", "it is the stream's last event", seen.types);

  // The resume it names, through connectAgent, with the agent finishing.
  await agentStep("finish");
  // whole: the reply (or the tool call's arguments) the agent must end
  // with.
  const resume = async (name, a, from, whole) => {
    resumeFrom = { path: `/runs/${runId}/events`, lastEventId: from };
    const again = { types: [], finished: false, failed: null };
    try {
      await a.connectAgent({}, {
        onEvent: ({ event }) => { again.types.push(event.type); },
        onRunFinishedEvent: () => { again.finished = true; },
        onRunFailed: ({ error }) => { again.failed = String(error?.message ?? error); },
      });
    } catch (e) {
      again.failed = String(e?.message ?? e);
    }
    process.stdout.write(`RESUMED ${name} ${JSON.stringify({ ...again, messages: a.messages })}\n`);
    check(again.finished && again.failed === null, `${name}: the resume reaches RUN_FINISHED`, again);
    const ids = a.messages.map((m) => m.id);
    check(new Set(ids).size === ids.length, `${name}: no message twice`, a.messages);
    if (cut === "tool") {
      const calls = a.messages.flatMap((m) => m.toolCalls ?? []);
      check(calls.length === 1 && calls[0].id === "c1" && calls[0].function.arguments === whole,
        `${name}: the tool call's arguments ${whole}, once`, a.messages);
    } else {
      const reply = a.messages.filter((m) => m.role === "assistant").map((m) => m.content).join("");
      check(reply === whole, `${name}: the reply ${JSON.stringify(whole)}, once`, a.messages);
    }
  };
  const [all, afterCut] = cut === "tool" ? ['{"q":"x"}', '"x"}'] : ["before after", "after"];
  // This agent kept its state: it ends with the message whole, once.
  await resume("kept", agent, ended.value.lastEventId, all);
  if (cut !== "between") {
    // A reload resumed at the same id: the part after the cut only (it
    // has none of the events before it; README, design.md §The doors).
    const fresh = () => {
      const a = new ResumingAgent({ url: `${door}/agui/${key}/echo` });
      a.addMessage({ id: "u1", role: "user", content: "long job" });
      return a;
    };
    await resume("fresh", fresh(), ended.value.lastEventId, afterCut);
    // What the documentation tells such a client: resume from 0.
    await resume("fresh from 0", fresh(), "0", all);
  }
} catch (e) {
  failures.push(e.stack ?? String(e));
}
if (failures.length > 0) {
  process.stderr.write(failures.join("\n\n") + "\n");
  process.exit(1);
}
process.stdout.write("DONE\n");
process.exit(0); // the readline on stdin would keep the process alive
