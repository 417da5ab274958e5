// Two turns with the official AG-UI client (HttpAgent, its default event
// verification on) against agent FUNDUQ_AGENT of provider FUNDUQ_PROVIDER
// through FUNDUQ_DOOR: "yes", then, on funduq's thread, "yes" again. The
// client sends on the second turn the whole conversation it holds, as it
// always does. Prints one JSON line: the error (null when both turns went
// through), funduq's thread id, and the messages the client ended with.
// Run by resenthistory_test.go, whose raw-wire provider answers.
import { HttpAgent } from "@ag-ui/client";

const { FUNDUQ_DOOR: door, FUNDUQ_PROVIDER: key, FUNDUQ_AGENT: name } = process.env;
if (!door || !key || !name) {
  throw new Error("FUNDUQ_DOOR, FUNDUQ_PROVIDER and FUNDUQ_AGENT are required");
}
const agent = new HttpAgent({ url: `${door}/agui/${key}/${name}` });
let threadId = null;
let error = null;
try {
  agent.addMessage({ id: "u1", role: "user", content: "yes" });
  await agent.runAgent({}, {
    onEvent: ({ event }) => {
      if (event.type === "RUN_STARTED") threadId = event.threadId;
    },
  });
  agent.threadId = threadId; // continuing means using funduq's id
  agent.addMessage({ id: "u2", role: "user", content: "yes" });
  await agent.runAgent();
} catch (e) {
  error = String(e && e.message ? e.message : e);
}
console.log(JSON.stringify({ error, threadId, messages: agent.messages }));
