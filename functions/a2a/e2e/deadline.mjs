// A stream cut at the Lambda deadline as the official A2A JavaScript client
// (@a2a-js/sdk) sees it, in A2A 1.0 (ClientFactory) and 0.3
// (LegacyJsonRpcTransport), run by functions/a2a/lambda/outside_deadline_sdk_test.go
// through the Lambda entry. The Go side plays the agent (lines "REQ <step>
// <arg>" out, "OK <answer>" back) and ends every streaming invocation
// that opens a task a few seconds after the door's margin; the resume has
// time. What the SDK hands application code when the stream is cut is
// printed ("SEEN ..."), then checked: the error the door sent as the
// stream's last item (-32048, data.reason stream_ended) reachable from
// what the SDK throws, and the resume it names, made with the SDK,
// reaching the task's final status. Any failed check throws (non-zero
// exit); the last line is "DONE".
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { LegacyJsonRpcTransport } from "@a2a-js/sdk/compat/v0_3/client";
import { Role, TaskState } from "@a2a-js/sdk";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";

const door = process.env.FUNDUQ_DOOR;
const provider = process.env.FUNDUQ_PROVIDER;
const failures = [];
const check = (cond, what, got) => {
  if (!cond) throw new Error(`check failed: ${what}: ${JSON.stringify(got, null, 1)}`);
};
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const agent = async (step, arg = "") => {
  process.stdout.write(`REQ ${step} ${arg}\n`);
  const { value } = await lines.next();
  check(value?.startsWith("OK"), `agent step ${step}`, value);
  return value.slice(3);
};
const msg = (text) => ({
  messageId: randomUUID(),
  role: Role.ROLE_USER,
  parts: [{ content: { $case: "text", value: text } }],
});
const partText = (parts) => (parts ?? []).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");

// The door sits behind API Gateway, which names itself https; the test's
// stand-in listens on plain http at the same host.
const fetchImpl = (url, init) => fetch(String(url).replace(/^https:/, "http:"), init);

const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default,
  { transports: [new JsonRpcTransportFactory({ fetchImpl })] }));
const v10 = await factory.createFromUrl(`${door}/a2a/${provider}/echo/`);
const card = await v10.getAgentCard();
const endpoint = String(card.supportedInterfaces?.[0]?.url ?? `${door}/a2a/${provider}/echo/rpc`);
const v03 = new LegacyJsonRpcTransport({ endpoint, fetchImpl });

for (const [v, cl, resume] of [["1.0", v10, "SubscribeToTask"], ["0.3", v03, "tasks/resubscribe"]]) {
  const what = (s) => `${v} ${s}`;
  try {
    // The stream, read to its end as an application would: items until
    // the loop ends or throws.
    const items = [];
    let thrown;
    try {
      for await (const ev of cl.sendMessageStream({ message: msg("long job") })) {
        items.push({ kind: ev.payload?.$case, value: ev.payload?.value });
        if (items.length === 1) {
          await agent("start");
          await agent("delta", "before ");
        }
      }
    } catch (e) {
      thrown = e;
    }
    const seen = thrown === undefined
      ? { ended: "silently", items: items.length }
      : {
          thrown: thrown?.name, message: thrown?.message,
          cause: thrown?.cause && { name: thrown.cause.name, envelopeCode: thrown.cause.envelopeCode, data: thrown.cause.data },
          items: items.length,
        };
    process.stdout.write(`SEEN ${v} ${JSON.stringify(seen)}\n`);
    check(items.length > 0 && items[0].kind === "task", what("the stream's first item is the task"), items);
    const taskId = items[0].value.id;
    check(thrown !== undefined, what("the cut stream fails (not a silent end, read as the task's end)"), seen);
    // The SDK names no class for -32048: its JsonRpcTransportError, the
    // cause of the stream's Error, carries the code and data as sent.
    const cause = thrown.cause;
    check(cause?.envelopeCode === -32048 && cause?.data?.reason === "stream_ended", what("the error's code and reason"), seen);
    check(cause.data.taskId === taskId && cause.data.resume === resume && /^[0-9]+$/.test(cause.data.lastEventId ?? ""),
      what(`the error names task ${taskId}, ${resume} and a Last-Event-ID`), seen);

    // The resume it names, with the SDK: the task as it stands first,
    // then (the agent finishing now) the rest to its final status.
    const rest = [];
    for await (const ev of cl.resubscribeTask({ id: cause.data.taskId },
      { serviceParameters: { "Last-Event-ID": cause.data.lastEventId } })) {
      rest.push({ kind: ev.payload?.$case, value: ev.payload?.value });
      if (rest.length === 1) {
        await agent("delta", "after");
        await agent("finish");
      }
    }
    check(rest.length > 1 && rest[0].kind === "task" && rest[0].value.id === taskId, what("the resume's first item is the task"), rest);
    const last = rest[rest.length - 1];
    check(last.kind === "statusUpdate" && last.value.status?.state === TaskState.TASK_STATE_COMPLETED,
      what("the resume ends with the final status"), rest.map((i) => [i.kind, i.value.status?.state]));
    const got = await cl.getTask({ id: taskId });
    check(got.status?.state === TaskState.TASK_STATE_COMPLETED && partText(got.artifacts?.[0]?.parts) === "before after",
      what("the task, whole"), got);
  } catch (e) {
    failures.push(`${v}: ${e.stack ?? e}`);
  }
}
if (failures.length > 0) {
  process.stderr.write(failures.join("\n\n") + "\n");
  process.exit(1);
}
process.stdout.write("DONE\n");
process.exit(0); // the readline on stdin would keep the process alive
