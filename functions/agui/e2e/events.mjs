// Runs one turn with the official AG-UI client (HttpAgent, its default
// event verification on) against FUNDUQ_DOOR for agent FUNDUQ_AGENT of
// provider FUNDUQ_PROVIDER, and prints one JSON line: the error (null when
// the run went through), the event types the client applied, and the
// state and messages it ended with. Run by outside_aguievents_test.go,
// whose raw-wire provider emits the events.
import { HttpAgent } from "@ag-ui/client";

const { FUNDUQ_DOOR: door, FUNDUQ_PROVIDER: key, FUNDUQ_AGENT: name } = process.env;
if (!door || !key || !name) {
  throw new Error("FUNDUQ_DOOR, FUNDUQ_PROVIDER and FUNDUQ_AGENT are required");
}
const agent = new HttpAgent({ url: `${door}/agui/${key}/${name}` });
agent.addMessage({ id: "u1", role: "user", content: "go" });
const types = [];
let error = null;
try {
  await agent.runAgent({}, { onEvent: ({ event }) => { types.push(event.type); } });
} catch (e) {
  error = String(e && e.message ? e.message : e);
}
console.log(JSON.stringify({ error, types, state: agent.state ?? null, messages: agent.messages }));
