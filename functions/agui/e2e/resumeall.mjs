// Resumes run FUNDUQ_RUN at every Last-Event-ID from 0 to FUNDUQ_LAST with
// the official AG-UI client (@ag-ui/client, its default event verification
// on), each through a fresh agent's reconnect seat (connectAgent reading
// GET /runs/{runId}/events with that Last-Event-ID), and prints one JSON
// line per resume: the id, the error the client raised (null when it took
// the stream) and the event types it applied. Run by
// outside_resumeclient_test.go, whose raw-wire provider emitted the run.
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const { FUNDUQ_DOOR: door, FUNDUQ_RUN: runId, FUNDUQ_LAST: last } = process.env;
if (!door || !runId || !last) {
  throw new Error("FUNDUQ_DOOR, FUNDUQ_RUN and FUNDUQ_LAST are required");
}
let from;
class ResumingAgent extends HttpAgent {
  connect() {
    return transformHttpEventStream(runHttpRequest(() => fetch(`${door}/runs/${runId}/events`,
      { headers: { Accept: "text/event-stream", "Last-Event-ID": String(from) } })));
  }
}
for (let at = 0; at <= Number(last); at++) {
  from = at;
  const a = new ResumingAgent({ url: `${door}/agui/none/none` });
  const types = [];
  let error = null;
  try {
    await a.connectAgent({}, {
      onEvent: ({ event }) => { types.push(event.type); },
      onRunFailed: ({ error: e }) => { error = String(e?.message ?? e); },
    });
  } catch (e) {
    error = String(e?.message ?? e);
  }
  console.log(JSON.stringify({ at, error, types }));
}
