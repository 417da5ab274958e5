// End-to-end acceptance of the funduq A2A door with the official A2A
// JavaScript client (@a2a-js/sdk), run by functions/a2a/e2e_test.go against
// a real broker node and the door on loopback. Prints "FINISH <taskId>"
// when the Go side may let the held (cancelled) run end, then one JSON
// report line. Any failed check throws (non-zero exit).
import { ClientFactory } from "@a2a-js/sdk/client";
import { Role, TaskState } from "@a2a-js/sdk";
import {
  TaskNotCancelableError,
  TaskNotFoundError,
  A2AError,
} from "@a2a-js/sdk/errors";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";

const door = process.env.FUNDUQ_DOOR;
const provider = process.env.FUNDUQ_PROVIDER;
const check = (cond, what, got) => {
  if (!cond) throw new Error(`check failed: ${what}: ${JSON.stringify(got)}`);
};
const msg = (text, extra = {}) => ({
  messageId: randomUUID(),
  role: Role.ROLE_USER,
  parts: [{ content: { $case: "text", value: text } }],
  ...extra,
});
const textOf = (artifacts) =>
  (artifacts ?? []).flatMap((a) => a.parts.map((p) => (p.content?.$case === "text" ? p.content.value : ""))).join("");
const stdin = createInterface({ input: process.stdin });
const lines = stdin[Symbol.asyncIterator]();
const waitLine = async (want) => {
  const { value } = await lines.next();
  check(value === want, "signal from the test", value);
};
const expectError = async (p, cls, what) => {
  try {
    await p;
  } catch (e) {
    check(e instanceof cls, what, `${e?.name}: ${e?.message}`);
    return e;
  }
  throw new Error(`check failed: ${what}: no error`);
};

const report = {};
const factory = new ClientFactory();

// Card discovery.
const echo = await factory.createFromUrl(`${door}/a2a/${provider}/echo/`);
const card = await echo.getAgentCard();
check(card.name === "echo" && card.capabilities?.streaming === true, "agent card", card);
check(echo.protocolVersion === "1.0", "negotiated version", echo.protocolVersion);

// A blocking send.
const sent = await echo.sendMessage({ message: msg("hello door") });
check(sent.status?.state === TaskState.TASK_STATE_COMPLETED, "blocking send completes", sent.status);
check(textOf(sent.artifacts) === "echo: hello door", "blocking send artifact", sent.artifacts);
check(sent.history.length === 2, "history holds both turns", sent.history);
report.blocking = { taskId: sent.id, contextId: sent.contextId };

// A streaming send on the same context.
const items = [];
for await (const ev of echo.sendMessageStream({ message: msg("stream me", { contextId: sent.contextId }) })) {
  items.push(ev.payload?.$case);
  if (ev.payload?.$case === "task") report.streamed = { taskId: ev.payload.value.id };
  if (ev.payload?.$case === "statusUpdate") report.streamedFinal = ev.payload.value.status?.state;
}
check(items[0] === "task" && items.includes("artifactUpdate"), "stream items", items);
check(report.streamedFinal === TaskState.TASK_STATE_COMPLETED, "stream ends completed", report.streamedFinal);

// Get and list.
const got = await echo.getTask({ id: report.streamed.taskId });
check(got.id === report.streamed.taskId && got.status?.state === TaskState.TASK_STATE_COMPLETED, "get", got);
check(textOf(got.artifacts) === "echo: stream me", "get artifacts", got.artifacts);
const listed = await echo.listTasks({ contextId: sent.contextId, pageSize: 10 });
check(listed.tasks.length === 2 && listed.totalSize === 2 && listed.tasks[0].id === report.streamed.taskId, "list", listed);

// Cancel of a finished task.
await expectError(echo.cancelTask({ id: sent.id }), TaskNotCancelableError, "cancel of a finished task");

// An unknown contextId is refused, an unknown taskId is not found.
const unknownCtx = await expectError(echo.sendMessage({ message: msg("x", { contextId: "thread_nope" }) }), A2AError, "unknown contextId");
report.unknownContextCode = unknownCtx.envelopeCode ?? unknownCtx.code;
await expectError(echo.getTask({ id: "run_nope" }), TaskNotFoundError, "unknown task");

// Cancel of a running task: working (marked) while the provider works,
// canceled only once it finishes.
const held = await echo.sendMessage({ message: msg("hold"), configuration: { returnImmediately: true } });
let cur = held;
for (let i = 0; i < 400 && cur.status?.state !== TaskState.TASK_STATE_WORKING; i++) {
  await new Promise((r) => setTimeout(r, 25));
  cur = await echo.getTask({ id: held.id });
}
check(cur.status?.state === TaskState.TASK_STATE_WORKING, "held task is working", cur.status);
const cancelled = await echo.cancelTask({ id: held.id });
check(cancelled.status?.state === TaskState.TASK_STATE_WORKING && cancelled.metadata?.["funduq/cancelRequested"] === true,
  "cancel answers working + marker", cancelled);
await waitLine("ASKED");
const stillWorking = await echo.getTask({ id: held.id });
check(stillWorking.status?.state === TaskState.TASK_STATE_WORKING, "working until the provider finishes", stillWorking.status);
process.stdout.write(`FINISH ${held.id}\n`);
for (let i = 0; i < 400 && cur.status?.state !== TaskState.TASK_STATE_CANCELED; i++) {
  await new Promise((r) => setTimeout(r, 25));
  cur = await echo.getTask({ id: held.id });
}
check(cur.status?.state === TaskState.TASK_STATE_CANCELED, "canceled once the provider finished", cur.status);
report.cancelled = { taskId: held.id };

// An answer to an input-required task resumes the same task id.
const ask = await factory.createFromUrl(`${door}/a2a/${process.env.FUNDUQ_ASKER}/ask/`);
const asked = await ask.sendMessage({ message: msg("may I?") });
check(asked.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED, "the task asks", asked.status);
const answered = await ask.sendMessage({ message: msg("yes", { taskId: asked.id, contextId: asked.contextId }) });
check(answered.id === asked.id && answered.status?.state === TaskState.TASK_STATE_COMPLETED, "the answer resumes the same task", answered);
report.resumed = { taskId: asked.id };

process.stdout.write(JSON.stringify(report) + "\n");
process.exit(0);
