// The conformance check of functions/agui/outside_conformance_test.go.
// FUNDUQ_EVENTS names a JSON file holding the events a raw-wire provider
// sends for one run. This script (1) parses each of them with the official
// @ag-ui/core event schema, reporting those it refuses, then (2) runs one
// turn of the official @ag-ui/client HttpAgent (its default event
// enforcement and verification on) against FUNDUQ_DOOR for agent
// FUNDUQ_AGENT of provider FUNDUQ_PROVIDER, keeping the raw SSE it was
// sent, and (3) parses every event on that stream with the same schema. It
// prints one JSON line: the core refusals of the provider's events, the
// client's error (null when the run went through), the event types it
// applied, and the stream's events the schema refuses.
import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";
import { readFileSync } from "node:fs";

const { FUNDUQ_DOOR: door, FUNDUQ_PROVIDER: key, FUNDUQ_AGENT: name, FUNDUQ_EVENTS: file } = process.env;
if (!door || !key || !name || !file) {
  throw new Error("FUNDUQ_DOOR, FUNDUQ_PROVIDER, FUNDUQ_AGENT and FUNDUQ_EVENTS are required");
}
const issue = (r) => r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
const coreRefuses = [];
JSON.parse(readFileSync(file, "utf8")).forEach((ev, i) => {
  const r = EventSchema.safeParse(ev);
  if (!r.success) coreRefuses.push({ i, issue: issue(r) });
});

let sse = "";
const reading = [];
const teeFetch = async (url, init) => {
  const res = await fetch(url, init);
  const [a, b] = res.body.tee();
  reading.push((async () => {
    const dec = new TextDecoder();
    try {
      for await (const chunk of b) sse += dec.decode(chunk, { stream: true });
    } catch {}
  })());
  return new Response(a, { status: res.status, statusText: res.statusText, headers: res.headers });
};
const agent = new HttpAgent({ url: `${door}/agui/${key}/${name}`, fetch: teeFetch });
agent.addMessage({ id: "u1", role: "user", content: "go" });
const types = [];
let error = null;
try {
  await agent.runAgent({}, { onEvent: ({ event }) => { types.push(event.type); } });
} catch (e) {
  error = String(e && e.message ? e.message : e);
}
await Promise.all(reading);
const streamRefuses = [];
sse.split(/\r?\n\r?\n/).forEach((block) => {
  const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
  if (!data) return;
  let ev;
  try {
    ev = JSON.parse(data);
  } catch (e) {
    streamRefuses.push({ event: data, issue: `not JSON: ${e.message}` });
    return;
  }
  const r = EventSchema.safeParse(ev);
  if (!r.success) streamRefuses.push({ event: data, issue: issue(r) });
});
console.log(JSON.stringify({ coreRefuses, error, types, streamRefuses }));
