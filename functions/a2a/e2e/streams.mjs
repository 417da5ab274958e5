// Streams of the funduq A2A door as the official A2A JavaScript client
// (@a2a-js/sdk) sees them, in A2A 1.0 (ClientFactory) and 0.3
// (LegacyJsonRpcTransport), run by functions/a2a/e2e_streams_test.go. The
// Go side plays the agent: this script asks it for each agent step with a
// line "REQ <step> <arg>" and reads "OK <answer>" back, so the agent's
// pace follows what the client has seen (no timers). Any failed check
// throws (non-zero exit); the last line is "DONE".
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { LegacyJsonRpcTransport } from "@a2a-js/sdk/compat/v0_3/client";
import { Role, TaskState } from "@a2a-js/sdk";
import { TaskNotFoundError, UnsupportedOperationError } from "@a2a-js/sdk/errors";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";

const door = process.env.FUNDUQ_DOOR;
const provider = process.env.FUNDUQ_PROVIDER;
// Each scenario runs on after another's failure, so one run shows them
// all; the script fails at the end if any did.
const failures = [];
const scenario = async (name, fn) => {
  try {
    await fn();
  } catch (e) {
    failures.push(`${name}: ${e.stack ?? e}`);
    rawStreams = [];
  }
};
const check = (cond, what, got) => {
  if (!cond) throw new Error(`check failed: ${what}: ${JSON.stringify(got, null, 1)}`);
};
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
// agent asks the Go side for one agent step and returns its answer.
const agent = async (step, arg = "") => {
  process.stdout.write(`REQ ${step} ${arg}\n`);
  const { value } = await lines.next();
  check(value?.startsWith("OK"), `agent step ${step}`, value);
  return value.slice(3);
};
const msg = (text, extra = {}) => ({
  messageId: randomUUID(),
  role: Role.ROLE_USER,
  parts: [{ content: { $case: "text", value: text } }],
  ...extra,
});
const partText = (parts) => (parts ?? []).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
const TERMINAL = [TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED];
const ENDING = [...TERMINAL, TaskState.TASK_STATE_INPUT_REQUIRED];

// The raw SSE bodies the client read (to see v0.3's "final" flag, which
// the SDK's v1.0 types do not carry).
let rawStreams = [];
const tap = (seat) => async (url, init = {}) => {
  const headers = new Headers(init.headers);
  if (seat) headers.set("X-Outside-Seat", seat);
  const res = await fetch(url, { ...init, headers });
  if (!(res.headers.get("content-type") ?? "").includes("text/event-stream") || !res.body) return res;
  const [mine, theirs] = res.body.tee();
  rawStreams.push(
    (async () => {
      const dec = new TextDecoder();
      let s = "";
      try {
        for await (const c of theirs) s += dec.decode(c, { stream: true });
      } catch {
        // a stream the client dropped
      }
      return s;
    })(),
  );
  return new Response(mine, { status: res.status, statusText: res.statusText, headers: res.headers });
};
const rawItems = async () => {
  const bodies = await Promise.all(rawStreams);
  rawStreams = [];
  return bodies.map((b) =>
    b
      .split("\n\n")
      .map((ev) => ev.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join(""))
      .filter((d) => d !== "")
      .map((d) => JSON.parse(d)),
  );
};

// The clients: A2A 1.0 through card discovery, A2A 0.3 over the legacy
// JSON-RPC transport at the card's endpoint; both with the caller's key at
// the seat the door's authorizer reads ("" anonymous).
const clients = async (seat) => {
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default,
    { transports: [new JsonRpcTransportFactory({ fetchImpl: tap(seat) })] }));
  const v10 = await factory.createFromUrl(`${door}/a2a/${provider}/echo/`);
  check(v10.protocolVersion === "1.0", "negotiated version", v10.protocolVersion);
  const card = await v10.getAgentCard();
  const endpoint = card.supportedInterfaces?.[0]?.url ?? `${door}/a2a/${provider}/echo/rpc`;
  const v03 = new LegacyJsonRpcTransport({ endpoint, fetchImpl: tap(seat) });
  return { v10, v03, endpoint };
};

// collect reads a stream to its end, calling onItem after each item.
const collect = async (gen, onItem = async () => {}) => {
  const items = [];
  for await (const ev of gen) {
    const it = { kind: ev.payload?.$case, value: ev.payload?.value };
    if (process.env.FUNDUQ_DEBUG) process.stderr.write(`item ${JSON.stringify(ev)}\n`);
    items.push(it);
    await onItem(it, items.length - 1);
  }
  return items;
};

// verify checks what a user of the SDK would notice about one stream:
// a Task first and only updates after it, one task and context id, the
// reply's text seen exactly once (the snapshot's artifacts and the
// updates, assembled with the append flags; none streamed again after a
// snapshot whose history already holds it), one ending
// status and it last, no working status after an ending state, the error
// text on a failure. Returns the assembled artifacts.
const verify = (items, { what, reply, end, errorText, taskId }) => {
  check(items.length > 0 && items[0].kind === "task", `${what}: first item is a Task`, items);
  const task = items[0].value;
  if (taskId) check(task.id === taskId, `${what}: the task id`, task.id);
  const arts = new Map((task.artifacts ?? []).map((a) => [a.artifactId, partText(a.parts)]));
  // A reply the snapshot's history already holds (the task had ended) is
  // in its artifacts too, whole (doors.md §3.7.1): it must not stream in
  // again.
  const inHistory = (task.history ?? []).some((m) => m.role === Role.ROLE_AGENT && partText(m.parts) === reply);
  if (reply !== undefined && inHistory) {
    check([...arts.values()].includes(reply), `${what}: a reply in the snapshot's history is in its artifacts`, task);
  }
  let state = task.status?.state;
  const endings = [];
  items.slice(1).forEach((it, i) => {
    check(it.kind === "statusUpdate" || it.kind === "artifactUpdate", `${what}: item ${i + 1} is an update`, it);
    check(it.value.taskId === task.id && it.value.contextId === task.contextId, `${what}: item ${i + 1} ids`, it.value);
    if (it.kind === "artifactUpdate") {
      const a = it.value.artifact;
      const text = partText(a.parts);
      if (it.value.append) {
        check(arts.has(a.artifactId), `${what}: append to an artifact first sent`, it.value);
        arts.set(a.artifactId, arts.get(a.artifactId) + text);
      } else {
        check(!arts.has(a.artifactId), `${what}: append=false for an artifact already shown`, { it: it.value, arts: [...arts] });
        arts.set(a.artifactId, text);
      }
      check(!ENDING.includes(state), `${what}: an artifact after the state ${state}`, it.value);
      return;
    }
    const next = it.value.status?.state;
    check(!(ENDING.includes(state) && next === TaskState.TASK_STATE_WORKING), `${what}: ${state} went back to working`, items);
    state = next;
    if (ENDING.includes(next)) endings.push(i + 1);
    if (errorText && next === TaskState.TASK_STATE_FAILED) {
      check(partText(it.value.status?.message?.parts).includes(errorText), `${what}: the failure's text`, it.value.status);
    }
  });
  check(endings.length === 1 && endings[0] === items.length - 1, `${what}: one ending status, last`, items.map((i) => [i.kind, i.value.status?.state]));
  check(state === end, `${what}: ends ${end}`, state);
  if (reply !== undefined) {
    const seen = [...arts.values()].filter((t) => t === reply).length;
    check(seen === 1, `${what}: the reply ${JSON.stringify(reply)} seen once`, { history: task.history, arts: [...arts] });
  }
  return arts;
};

// finals checks v0.3's raw flags: final: true exactly once, on the last
// item (verify checks that item is the one ending status).
const finals = (raw, what) => {
  const fl = raw.map((r) => r.result?.final === true);
  check(fl.filter(Boolean).length === 1 && fl[fl.length - 1], `${what}: final:true once, last`, raw.map((r) => [r.result?.kind, r.result?.status?.state, r.result?.final]));
};

// The caller is known (its key at the seat): a retried first message is
// its own task again (design.md D17).
const { v10, v03 } = await clients(process.env.FUNDUQ_SEAT);
for (const [v, cl] of [["1.0", v10], ["0.3", v03]]) {
  const what = (s) => `${v} ${s}`;
  const legacy = v === "0.3";
  rawStreams = [];

  // A fast agent: the reply is done before the caller's stream (a retry
  // of its message with the same messageId) opens.
  await scenario(what("fast"), async () => {
    const m = msg("fast");
    const p = cl.sendMessage({ message: m });
    await agent("reply", "fast reply");
    const sent = await p;
    check(sent.status?.state === TaskState.TASK_STATE_COMPLETED, what("fast send"), sent.status);
    const items = await collect(cl.sendMessageStream({ message: m }));
    verify(items, { what: what("fast agent, stream opened after the end"), reply: "fast reply", end: TaskState.TASK_STATE_COMPLETED, taskId: sent.id });
    if (legacy) finals((await rawItems())[0], what("fast"));
  });

  // A fresh stream on a fast agent (it may finish before the snapshot).
  await scenario(what("quick"), async () => {
    const items = await collect(cl.sendMessageStream({ message: msg("quick") }), async (it, i) => {
      if (i === 0) await agent("reply", "quick reply");
    });
    verify(items, { what: what("quick agent"), reply: "quick reply", end: TaskState.TASK_STATE_COMPLETED });
    if (legacy) finals((await rawItems())[0], what("quick"));
  });

  // A slow agent: each event only once the client saw the last one.
  await scenario(what("slow"), async () => {
    const deltas = ["one ", "two ", "three"];
    let sent = 0;
    const items = await collect(cl.sendMessageStream({ message: msg("slow") }), async (it, i) => {
      if (i === 0) return void (await agent("start"));
      if (sent < deltas.length && (it.kind === "artifactUpdate" || sent === 0)) {
        await agent("delta", deltas[sent++]);
      } else if (sent === deltas.length) {
        sent++;
        await agent("finish");
      }
    });
    const arts = verify(items, { what: what("slow agent"), reply: "one two three", end: TaskState.TASK_STATE_COMPLETED });
    check(arts.size === 1, what("slow: one artifact"), [...arts]);
    if (legacy) finals((await rawItems())[0], what("slow"));
  });

  // An agent that pauses, then is answered by a streamed message.
  await scenario(what("paused"), async () => {
    const items = await collect(cl.sendMessageStream({ message: msg("may I?") }), async (it, i) => {
      if (i === 0) await agent("pause", "May I?");
    });
    verify(items, { what: what("paused"), reply: "May I?", end: TaskState.TASK_STATE_INPUT_REQUIRED });
    const task = items[0].value;
    const again = await collect(cl.sendMessageStream({ message: msg("yes", { taskId: task.id, contextId: task.contextId }) }), async (it, i) => {
      if (i === 0) await agent("reply", "done");
    });
    const arts = verify(again, { what: what("answered"), reply: "done", end: TaskState.TASK_STATE_COMPLETED, taskId: task.id });
    check([...arts.values()].includes("May I?"), what("answered: the first round's artifact kept"), [...arts]);
    if (legacy) {
      const raw = await rawItems();
      finals(raw[0], what("paused"));
      finals(raw[1], what("answered"));
    }
  });

  // An agent that fails.
  await scenario(what("failed"), async () => {
    const items = await collect(cl.sendMessageStream({ message: msg("fail") }), async (it, i) => {
      if (i === 0) await agent("fail", "the model is on fire");
    });
    verify(items, { what: what("failed"), reply: "partial", end: TaskState.TASK_STATE_FAILED, errorText: "the model is on fire" });
    if (legacy) finals((await rawItems())[0], what("failed"));
  });

  // Blocking sends: a failure's text is on the task's status; a pause
  // answers input-required with its question, and a retried stream of the
  // paused task shows it as it stands (no replay, one final status).
  await scenario(what("blocking"), async () => {
    const p = cl.sendMessage({ message: msg("fail blocking") });
    await agent("fail", "out of tokens");
    const failed = await p;
    check(failed.status?.state === TaskState.TASK_STATE_FAILED && partText(failed.status?.message?.parts).includes("out of tokens"),
      what("blocking failure"), failed.status);
    const m = msg("ask blocking");
    const q = cl.sendMessage({ message: m });
    await agent("pause", "Which one?");
    const paused = await q;
    check(paused.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED && partText(paused.artifacts?.[0]?.parts) === "Which one?",
      what("blocking pause"), paused);
    const items = await collect(cl.sendMessageStream({ message: m }));
    verify(items, { what: what("retried stream of a paused task"), reply: "Which one?", end: TaskState.TASK_STATE_INPUT_REQUIRED, taskId: paused.id });
    check(items.length === 2, what("paused: the snapshot and the final status"), items.map((i) => [i.kind, i.value.status?.state]));
    if (legacy) finals((await rawItems())[0], what("retried paused"));
    const r = cl.sendMessage({ message: msg("the first", { taskId: paused.id, contextId: paused.contextId }) });
    await agent("reply", "taken");
    const done = await r;
    check(done.id === paused.id && done.status?.state === TaskState.TASK_STATE_COMPLETED, what("blocking answer"), done.status);
  });

  // A task cancelled while its stream is open: the cancel answers working
  // with the marker, and the stream ends canceled once the agent stops.
  await scenario(what("cancelled"), async () => {
    let id;
    let asked = false;
    const items = await collect(cl.sendMessageStream({ message: msg("cancel me") }), async (it, i) => {
      if (i === 0) {
        id = it.value.id;
        await agent("start");
      } else if (i === 1) {
        await agent("delta", "half");
      } else if (it.kind === "artifactUpdate" && !asked) {
        asked = true;
        const c = await cl.cancelTask({ id });
        check(c.status?.state === TaskState.TASK_STATE_WORKING && c.metadata?.["funduq/cancelRequested"] === true, what("cancel answer"), c);
        await agent("cancelled");
      }
    });
    verify(items, { what: what("cancelled"), reply: "half", end: TaskState.TASK_STATE_CANCELED, taskId: id });
    if (legacy) finals((await rawItems())[0], what("cancelled"));
  });

  // A stream dropped mid-run and resubscribed: the snapshot holds what was
  // sent so far, the rest follows, the text is whole and seen once.
  await scenario(what("dropped"), async () => {
    const gen = cl.sendMessageStream({ message: msg("drop") });
    const first = [];
    for await (const ev of gen) {
      first.push({ kind: ev.payload?.$case, value: ev.payload?.value });
      if (first.length === 1) await agent("start");
      if (first.length === 2) await agent("delta", "before ");
      if (first.some((i) => i.kind === "artifactUpdate")) break; // the client drops
    }
    const id = first[0].value.id;
    await agent("delta", "while away ");
    let sent = false;
    const items = await collect(cl.resubscribeTask({ id }), async (it, i) => {
      if (!sent) {
        sent = true;
        await agent("delta", "after");
        await agent("finish");
      }
    });
    const arts = verify(items, { what: what("resubscribed"), reply: "before while away after", end: TaskState.TASK_STATE_COMPLETED, taskId: id });
    check(arts.size === 1, what("resubscribed: one artifact"), [...arts]);
    const got = await cl.getTask({ id });
    check(partText(got.artifacts?.[0]?.parts) === "before while away after", what("get after resubscribe"), got.artifacts);
    if (legacy) finals((await rawItems())[1], what("resubscribed"));
    // A finished task is not resubscribed.
    let err;
    try {
      await collect(cl.resubscribeTask({ id }));
    } catch (e) {
      err = e;
    }
    check(err instanceof UnsupportedOperationError, what("resubscribe to an ended task"), `${err?.name}: ${err?.message}`);
    rawStreams = [];
  });
}

// A stranger resubscribing to another caller's bound running task gets
// exactly what an unknown task id gets.
await scenario("stranger", async () => {
  const bound = await agent("bound");
  for (const seat of ["", process.env.FUNDUQ_STRAY]) {
    const { v10, v03 } = await clients(seat);
    for (const [v, cl] of [["1.0", v10], ["0.3", v03]]) {
      const answer = async (id) => {
        try {
          await collect(cl.resubscribeTask({ id }));
        } catch (e) {
          return e;
        }
        return undefined;
      };
      const unknown = await answer("run_nope");
      const got = await answer(bound);
      check(got instanceof TaskNotFoundError && unknown instanceof TaskNotFoundError, `${v} stranger ${seat ? "seated" : "anonymous"}: not found`,
        [`${got?.name}: ${got?.message}`, `${unknown?.name}: ${unknown?.message}`]);
      check(got.message.replace(bound, "ID") === unknown.message.replace("run_nope", "ID"), `${v} stranger: the unknown task's words`, [got.message, unknown.message]);
    }
  }
  rawStreams = [];
  await agent("unbind");
});

if (failures.length > 0) {
  process.stderr.write(failures.join("\n\n") + "\n");
  process.exit(1);
}
process.stdout.write("DONE\n");
process.exit(0);
