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
// finish" has the agent end the run; the text is whole. Any failed check
// throws (non-zero exit); the last line is "DONE".
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { createInterface } from "node:readline";

const { FUNDUQ_DOOR: door, FUNDUQ_PROVIDER: key } = process.env;
const check = (cond, what, got) => {
  if (!cond) throw new Error(`check failed: ${what}: ${JSON.stringify(got, null, 1)}`);
};
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const agentStep = async (step) => {
  process.stdout.write(`REQ ${step}\n`);
  const { value } = await lines.next();
  check(value?.startsWith("OK"), `agent step ${step}`, value);
};

// resumeFrom, when set, makes connect() the resume the door named: GET
// the run's events with Last-Event-ID (AG-UI's seat for reconnecting to a
// run; HttpAgent itself does not implement it).
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
  resumeFrom = { path: `/runs/${runId}/events`, lastEventId: ended.value.lastEventId };
  const again = { types: [], finished: false, failed: null };
  await agent.connectAgent({}, {
    onEvent: ({ event }) => { again.types.push(event.type); },
    onRunFinishedEvent: () => { again.finished = true; },
    onRunFailed: ({ error }) => { again.failed = String(error?.message ?? error); },
  });
  process.stdout.write(`RESUMED ${JSON.stringify({ ...again, messages: agent.messages })}\n`);
  check(again.finished && again.failed === null, "the resume reaches RUN_FINISHED", again);
  const reply = agent.messages.filter((m) => m.role === "assistant").map((m) => m.content).join("");
  check(reply === "before after", "the reply, whole and once", agent.messages);
} catch (e) {
  failures.push(e.stack ?? String(e));
}
if (failures.length > 0) {
  process.stderr.write(failures.join("\n\n") + "\n");
  process.exit(1);
}
process.stdout.write("DONE\n");
process.exit(0); // the readline on stdin would keep the process alive
