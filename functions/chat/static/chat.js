// funduq chat: a small AG-UI caller. It lists GET /agents, posts a turn to
// POST /agui/{provider}/{name} and reads the SSE answer from the fetch
// stream, answers interrupts with an AG-UI resume, and after a reload
// resumes a run still going with GET /runs/{runId}/events and
// Last-Event-ID. Everything shown is set with textContent: agent names,
// messages and event payloads are untrusted.
"use strict";
(function () {
  const STORE = "funduq.chat.v1";
  const $ = (id) => document.getElementById(id);
  const el = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  };
  const rid = (p) => p + "-" + (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));

  // ---- saved state: the selected agent and one conversation per agent ----
  let saved;
  try { saved = JSON.parse(localStorage.getItem(STORE)) || {}; } catch (e) { saved = {}; }
  if (!saved.convs) saved.convs = {};
  // persist saves every conversation as one item. An agent's reply can
  // outgrow localStorage (a few million characters), and a write that
  // fails would leave every later turn, in every conversation, unsaved:
  // then the ids, seqs and turns are kept with the longest texts shortened
  // (the page shows them whole until it reloads).
  const persist = () => {
    adopt();
    // Each conversation this tab writes carries this save's stamp: a tab
    // keeping a conversation it saved shortened (below) sees, by the
    // stamp, that another tab has saved it since.
    const stamp = rid("s");
    for (const c of mine) if (saved.convs[c]) saved.convs[c].savedBy = stamp;
    for (let keep = Infinity; keep >= 1024; keep = keep === Infinity ? 65536 : keep / 4) {
      const k = keep;
      const text = JSON.stringify(saved, function (key, v) {
        if (key !== "text" || typeof v !== "string" || v.length <= k || typeof this.role !== "string") return v;
        return v.slice(0, k) + "\n[… " + (v.length - k) + " more characters were not kept in this browser]";
      });
      try {
        localStorage.setItem(STORE, text);
        saveLen = text.length;
        // Saved whole, a conversation not going on is read back from here
        // on; one saved shortened stays this tab's, shown whole, until
        // another tab saves it (adopt).
        for (const c of mine) {
          if (!saved.convs[c] || !saved.convs[c].active) {
            if (k === Infinity) { mine.delete(c); shortened.delete(c); } else shortened.set(c, stamp);
          }
        }
        return;
      } catch (e) {
        // Too large, or storage refused: the next try waits as long as a
        // save of this size would have (persistSoon), not the next event.
        saveLen = Math.max(saveLen, text.length);
      }
    }
  };
  // Every tab of the page shares the one item. mine are the conversations
  // this tab changed since it last saved, or has a turn going in; every
  // other one is read back as the other tabs last saved it before this tab
  // saves, and when the user picks an agent. Saved whole as this tab had
  // read them, a tab wiped what another had said since (a conversation two
  // tabs talk in at once is the last saver's).
  const mine = new Set();
  // shortened: the conversations of mine kept only because this tab saved
  // them shortened, each with the stamp of that save. Another tab that
  // goes on with one saves it with its own stamp (or deletes it): it is
  // read back then, as any other, or this tab's next save wrote its stale
  // copy over the other tab's turns.
  const shortened = new Map();
  const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
  function adopt() {
    let stored;
    try { stored = JSON.parse(localStorage.getItem(STORE)); } catch (e) { return; }
    const convs = stored && typeof stored.convs === "object" && stored.convs ? stored.convs : {};
    for (const [k, stamp] of shortened) {
      if (own(convs, k) && convs[k] && convs[k].savedBy === stamp) continue;
      shortened.delete(k);
      mine.delete(k);
    }
    for (const k of Object.keys(saved.convs)) if (!mine.has(k) && !own(convs, k)) delete saved.convs[k];
    for (const k of Object.keys(convs)) if (!mine.has(k)) saved.convs[k] = convs[k];
  }
  // touch marks the conversation on screen as this tab's to save, first
  // reading it back as another tab may have gone on with it since this tab
  // drew it (and drawing it again if so).
  const touch = () => {
    const k = saved.agent || "";
    if (!mine.has(k) || shortened.has(k)) {
      const before = JSON.stringify(saved.convs[k] || null);
      adopt();
      if (JSON.stringify(saved.convs[k] || null) !== before) renderAll();
    }
    // Changed by this tab from here on: its own until its next save.
    shortened.delete(k);
    mine.add(k);
    return conv();
  };
  // persistSoon saves after a streamed event that carried raw characters.
  // Saving is a write of every conversation, whole: done at every event, a
  // reply of n deltas was n writes of a growing text, and a long reply
  // froze the tab. It saves once what streamed since the last save is half
  // of what that save wrote (so the writes add up to a few times what was
  // streamed), or when the stream pauses. What is saved is always
  // one consistent snapshot: a reload resumes after the saved seq, and the
  // events after it are streamed again onto the saved text.
  let saveLen = 0, unsaved = 0, saveTimer = null;
  const persistNow = () => {
    unsaved = 0;
    if (saveTimer !== null) { clearTimeout(saveTimer); saveTimer = null; }
    persist();
  };
  const persistSoon = (raw) => {
    unsaved += raw;
    if (unsaved * 2 >= saveLen) { persistNow(); return; }
    if (saveTimer !== null) clearTimeout(saveTimer);
    saveTimer = setTimeout(persistNow, 300);
  };

  // conv: {threadId, runId, lastSeq, active, transcript:[{id, role, text}], interrupts:[...]}
  function conv() {
    const k = saved.agent || "";
    if (!saved.convs[k]) saved.convs[k] = { threadId: "", runId: "", lastSeq: 0, active: false, transcript: [], interrupts: null };
    return saved.convs[k];
  }
  let agents = [];
  let busy = false; // a stream is being read

  function status(text, bad) {
    const s = $("chat-status");
    s.textContent = text;
    s.className = bad ? "bad" : "muted";
  }

  // ---- rendering ----
  const msgNodes = new Map(); // transcript entry id -> its text node holder

  function renderEntry(m) {
    let box = msgNodes.get(m.id);
    if (!box) {
      box = el("div", null, "msg " + m.role);
      box.dataset.id = m.id;
      const who = { user: "you", assistant: "agent", error: "error", note: "" }[m.role];
      if (who) box.appendChild(el("span", who, "who"));
      const body = el("span", null, "text");
      box.appendChild(body);
      $("transcript").appendChild(box);
      msgNodes.set(m.id, box);
    }
    box.querySelector(".text").textContent = m.text;
    scrollSoon("transcript");
  }

  // scrollSoon keeps a pane scrolled to its end, once a frame: reading
  // scrollHeight lays the page out, and done at every streamed event a
  // reply of a few thousand deltas froze the tab for longer than it took
  // to stream.
  const toScroll = new Set();
  function scrollSoon(id) {
    if (toScroll.size === 0) {
      requestAnimationFrame(() => {
        for (const p of toScroll) $(p).scrollTop = $(p).scrollHeight;
        toScroll.clear();
      });
    }
    toScroll.add(id);
  }

  function renderAll() {
    const c = conv();
    $("transcript").replaceChildren();
    msgNodes.clear();
    for (const m of c.transcript) renderEntry(m);
    $("events").replaceChildren();
    $("thread-info").textContent = c.threadId ? "thread " + c.threadId + (c.runId ? " · run " + c.runId + " · seq " + c.lastSeq : "") : "a new conversation";
    renderInterrupt();
    updateButtons();
  }

  function renderInterrupt() {
    const c = conv();
    const box = $("interrupt");
    const list = $("interrupt-list");
    list.replaceChildren();
    if (!c.interrupts || c.interrupts.length === 0) { box.hidden = true; return; }
    for (const it of c.interrupts) {
      const d = el("div", null, "ask");
      d.appendChild(el("strong", it.reason || it.message || "input needed"));
      d.appendChild(el("pre", JSON.stringify(it, null, 2)));
      list.appendChild(d);
    }
    box.hidden = false;
  }

  function updateButtons() {
    const a = selectedAgent();
    $("send").disabled = busy || !a || !!(conv().interrupts && conv().interrupts.length);
    $("interrupt-resolve").disabled = busy;
    $("interrupt-cancel").disabled = busy;
  }

  function logEvent(c, seq, ev, raw) {
    if (!shown(c)) return;
    const li = el("li");
    if (seq !== null) li.value = seq;
    li.appendChild(el("span", (ev && typeof ev.type === "string" ? ev.type : "?") + " ", "type"));
    li.appendChild(el("span", raw));
    $("events").appendChild(li);
    scrollSoon("events");
  }

  // shown: c is the conversation on screen. A stream keeps writing to its
  // own conversation after the user picks another agent, but only the one
  // on screen is drawn.
  function shown(c) { return c === conv(); }

  // show draws a transcript entry of c when c is on screen.
  function show(c, m) { if (shown(c)) renderEntry(m); }

  // entry finds or adds the transcript entry id of c.
  function entry(c, id, role, text) {
    let m = c.transcript.find((x) => x.id === id);
    if (!m) { m = { id, role, text: "" }; c.transcript.push(m); }
    if (text !== undefined) m.text = text;
    return m;
  }

  // ---- agents ----
  function selectedAgent() { return agents.find((a) => a.providerKey + "/" + a.name === saved.agent); }

  let listed = null; // the last listing, to rebuild the menu only when it changed

  async function loadAgents(quiet) {
    const sel = $("agent");
    let fresh;
    try {
      // GET /agents is paged (next_after); a menu of more than a few
      // thousand agents would not be read anyway.
      fresh = [];
      let after = "";
      for (let page = 0; page < 10; page++) {
        const res = await fetch("/agents?limit=500" + (after ? "&after=" + encodeURIComponent(after) : ""), { cache: "no-store" });
        if (!res.ok) throw new Error("HTTP " + res.status);
        const body = await res.json();
        fresh.push(...(body.agents || []));
        if (!body.has_more || !body.next_after) break;
        after = body.next_after;
      }
    } catch (e) {
      if (quiet === true) return;
      status("could not list the agents: " + e.message, true);
      fresh = [];
    }
    const text = JSON.stringify(fresh);
    if (text === listed || (quiet === true && document.activeElement === sel)) return;
    listed = text;
    agents = fresh;
    sel.replaceChildren();
    if (agents.length === 0) sel.appendChild(el("option", "no agent registered"));
    for (const a of agents) {
      const o = el("option", a.name + " · " + (a.fingerprint || a.providerKey.slice(0, 16)) + (a.online ? "" : " (offline)"));
      o.value = a.providerKey + "/" + a.name;
      sel.appendChild(o);
    }
    if (!selectedAgent() && agents.length && !busy) {
      saved.agent = agents[0].providerKey + "/" + agents[0].name;
      persistNow();
      if (quiet === true) renderAll();
    }
    if (selectedAgent()) sel.value = saved.agent;
    updateButtons();
  }

  // ---- the stream ----
  function handleEvent(c, seq, ev, raw) {
    if (seq !== null && seq > c.lastSeq) c.lastSeq = seq;
    switch (ev.type) {
      case "RUN_STARTED":
        if (typeof ev.threadId === "string") c.threadId = ev.threadId;
        if (typeof ev.runId === "string") c.runId = ev.runId;
        break;
      case "TEXT_MESSAGE_START":
        show(c, entry(c, "a:" + ev.messageId, "assistant"));
        break;
      case "TEXT_MESSAGE_CONTENT":
      case "TEXT_MESSAGE_CHUNK": {
        const m = entry(c, "a:" + ev.messageId, "assistant");
        if (typeof ev.delta === "string") m.text += ev.delta;
        show(c, m);
        break;
      }
      case "TOOL_CALL_START":
        show(c, entry(c, "t:" + ev.toolCallId, "note", "the agent calls " + (ev.toolCallName || "a tool")));
        break;
      case "RUN_ERROR":
        c.active = false;
        show(c, entry(c, "e:" + c.runId + ":" + seq, "error", ev.message || "the run failed"));
        break;
      case "RUN_FINISHED":
        c.active = false;
        if (ev.outcome && ev.outcome.type === "interrupt" && Array.isArray(ev.outcome.interrupts)) {
          c.interrupts = ev.outcome.interrupts;
        } else {
          c.interrupts = null;
        }
        if (shown(c)) renderInterrupt();
        break;
    }
    if (shown(c)) $("thread-info").textContent = "thread " + c.threadId + " · run " + c.runId + " · seq " + c.lastSeq;
    if (ev.type === "RUN_STARTED" || ev.type === "RUN_FINISHED" || ev.type === "RUN_ERROR") persistNow();
    else persistSoon(raw.length);
  }

  // consume reads an SSE response to its end; it reports whether the run
  // reached RUN_FINISHED or RUN_ERROR.
  async function consume(c, res) {
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    const block = (text) => {
      let seq = null;
      const data = [];
      for (const line of text.split("\n")) {
        if (line.startsWith(":")) continue;
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        let value = i < 0 ? "" : line.slice(i + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id" && /^\d+$/.test(value)) seq = parseInt(value, 10);
        else if (field === "data") data.push(value);
      }
      if (data.length === 0) return;
      const raw = data.join("\n");
      let ev = null;
      try { ev = JSON.parse(raw); } catch (e) { /* shown as is */ }
      logEvent(c, seq, ev, raw);
      if (ev && typeof ev === "object") handleEvent(c, seq, ev, raw);
    };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        block(buf.slice(0, i));
        buf = buf.slice(i + 2);
      }
    }
    return !c.active;
  }

  async function errorText(res) {
    try {
      const body = await res.json();
      if (body && body.error) return (body.error.code ? body.error.code + ": " : "") + (body.error.message || JSON.stringify(body.error));
      return JSON.stringify(body);
    } catch (e) {
      return "HTTP " + res.status;
    }
  }

  // answer handles a door response: an SSE stream, a thread snapshot (an
  // answer that did not complete the asks), or an error envelope.
  async function answer(c, res) {
    const ct = res.headers.get("Content-Type") || "";
    if (!res.ok) {
      c.active = false;
      show(c, entry(c, rid("e"), "error", await errorText(res)));
      persistNow();
      return;
    }
    if (!ct.startsWith("text/event-stream")) {
      c.active = false;
      let snap = null;
      try { snap = await res.json(); } catch (e) { /* not JSON */ }
      const w = snap && snap.waiting_run;
      show(c, entry(c, rid("n"), "note", w ? "the run still waits for: " + (w.outstanding_asks || []).join(", ") : "the door answered with the thread's snapshot"));
      persistNow();
      return;
    }
    await follow(c, res);
  }

  // follow reads a stream and, while the run goes on (the stream ended early:
  // a dropped connection or the stream's time budget), reconnects with
  // Last-Event-ID.
  async function follow(c, res) {
    let tries = 0;
    for (;;) {
      let finished = false;
      try {
        finished = await consume(c, res);
        tries = 0;
      } catch (e) {
        status("the stream broke (" + e.message + "); reconnecting", true);
      }
      if (finished || !c.active || !c.runId) return;
      if (++tries > 8) { status("gave up reconnecting to run " + c.runId, true); return; }
      await new Promise((r) => setTimeout(r, Math.min(250 * tries, 2000)));
      try {
        res = await fetch("/runs/" + encodeURIComponent(c.runId) + "/events", { headers: { "Last-Event-ID": String(c.lastSeq) }, cache: "no-store" });
      } catch (e) {
        continue;
      }
      if (!res.ok) { status("reconnecting failed: " + (await errorText(res)), true); c.active = false; persistNow(); return; }
      status("reconnected to run " + c.runId + " after seq " + c.lastSeq);
    }
  }

  async function post(c, a, body) {
    busy = true;
    updateButtons();
    status("talking to " + a.name + "…");
    try {
      const res = await fetch("/agui/" + encodeURIComponent(a.providerKey) + "/" + encodeURIComponent(a.name), {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify(body),
      });
      await answer(c, res);
      if (!c.active) status("");
    } catch (e) {
      status("the request failed: " + e.message, true);
      if (c.runId && c.active) await follow(c, null).catch(() => {});
    } finally {
      busy = false;
      persistNow();
      updateButtons();
    }
  }

  function baseBody(c) {
    return { threadId: c.threadId || "", runId: rid("chat"), state: null, tools: [], context: [], forwardedProps: {} };
  }

  async function send() {
    const a = selectedAgent();
    const text = $("message").value;
    if (!a || busy || text.trim() === "") return;
    const c = touch();
    const id = rid("m");
    renderEntry(entry(c, "u:" + id, "user", text));
    $("message").value = "";
    c.active = true;
    c.lastSeq = 0;
    c.runId = "";
    persistNow();
    const body = baseBody(c);
    body.messages = [{ id, role: "user", content: text }];
    await post(c, a, body);
  }

  async function resolve(status) {
    const a = selectedAgent();
    let c = conv();
    if (!a || busy || !c.interrupts) return;
    c = touch();
    if (!c.interrupts) return; // another tab answered it meanwhile
    const raw = $("interrupt-payload").value;
    let payload;
    try { payload = JSON.parse(raw); } catch (e) { payload = raw; }
    const body = baseBody(c);
    body.messages = [];
    body.resume = c.interrupts.map((it) => (status === "resolved" ? { interruptId: it.id, status, payload } : { interruptId: it.id, status }));
    renderEntry(entry(c, rid("u"), "user", status === "resolved" ? "answered: " + raw : "declined"));
    c.interrupts = null;
    c.active = true;
    renderInterrupt();
    persistNow();
    await post(c, a, body);
  }

  // ---- wiring ----
  $("agent").addEventListener("change", () => { saved.agent = $("agent").value; adopt(); persistNow(); renderAll(); resumeShown(); });
  $("refresh-agents").addEventListener("click", () => { listed = null; loadAgents(); });
  // Agents come and go while the page is open: look again now and then.
  setInterval(() => loadAgents(true), 10000);
  $("new-thread").addEventListener("click", () => {
    if (busy) return;
    touch();
    delete saved.convs[saved.agent || ""];
    persistNow();
    renderAll();
  });
  $("send").addEventListener("click", send);
  $("message").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(); } });
  $("interrupt-resolve").addEventListener("click", () => resolve("resolved"));
  $("interrupt-cancel").addEventListener("click", () => resolve("cancelled"));

  // resumeShown picks up the run of the conversation on screen where it
  // was, when one was going and nothing is being read: after a reload, or
  // when the user comes back to a conversation whose run went on unread.
  async function resumeShown() {
    let c = conv();
    if (busy || !c.active || !c.runId) return;
    c = touch();
    if (!c.active || !c.runId) return; // another tab saw it end meanwhile
    busy = true;
    updateButtons();
    status("reconnecting to run " + c.runId + " after seq " + c.lastSeq + "…");
    try {
      const res = await fetch("/runs/" + encodeURIComponent(c.runId) + "/events", { headers: { "Last-Event-ID": String(c.lastSeq) }, cache: "no-store" });
      if (res.ok) await follow(c, res);
      else { c.active = false; status("could not reconnect: " + (await errorText(res)), true); }
      if (!c.active) status("");
    } catch (e) {
      status("could not reconnect: " + e.message, true);
    } finally {
      busy = false;
      persistNow();
      updateButtons();
    }
  }

  (async function start() {
    await loadAgents();
    renderAll();
    await resumeShown();
    document.body.dataset.ready = "1";
  })();
})();
