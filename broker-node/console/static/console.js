// funduq operator console: polls /console/api/state and renders it.
// Everything shown is set with textContent: provider names, agent names,
// node ids and reasons are data, never markup.
"use strict";
(function () {
  const POLL_MS = 1500;
  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function row(cells, cls) {
    const tr = el("tr", null, cls);
    for (const c of cells) {
      if (c instanceof Node) { const td = el("td"); td.appendChild(c); tr.appendChild(td); }
      else if (c instanceof Clipped) { const td = el("td", c.shown, "free"); td.title = c.text; tr.appendChild(td); }
      else if (typeof c === "number") tr.appendChild(el("td", c, "num"));
      else tr.appendChild(el("td", c));
    }
    return tr;
  }
  // Clipped is text a provider chose (its name, a refusal reason): of any
  // length, so the cell shows its start and the title holds it whole.
  const CLIP = 120;
  function Clipped(text) {
    this.text = String(text);
    let shown = this.text;
    if (shown.length > CLIP) {
      shown = shown.slice(0, CLIP);
      if (/[\uD800-\uDBFF]$/.test(shown)) shown = shown.slice(0, -1); // not half a character
      shown += "…";
    }
    this.shown = shown;
  }
  const clip = (text) => new Clipped(text);
  function fill(tableId, rows, empty, span) {
    const body = $(tableId).tBodies[0];
    body.replaceChildren();
    if (rows.length === 0) {
      const td = el("td", empty, "muted");
      td.colSpan = span;
      const tr = el("tr"); tr.appendChild(td); body.appendChild(tr);
      return;
    }
    for (const r of rows) body.appendChild(r);
  }
  function dur(ms) {
    if (ms === null || ms === undefined) return "–";
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }
  function shortKey(k) { return k.length > 16 ? k.slice(0, 16) + "…" : k; }
  function keyCell(key, fp) {
    const span = el("span", fp || shortKey(key), "key");
    span.title = key;
    return span;
  }
  function tag(text, cls) { return el("span", text, "tag " + cls); }
  // agents shows the first few of a provider's agents and how many there
  // are: the provider chooses how many it registers, and a row listing
  // hundreds would push every other provider out of view.
  const AGENTS_SHOWN = 8, AGENT_CLIP = 48;
  function agents(list, count) {
    const frag = el("span");
    if (!list || list.length === 0) { frag.textContent = "–"; return frag; }
    if (!(count > list.length)) count = list.length;
    for (const a of list.slice(0, AGENTS_SHOWN)) {
      const chip = el("span", a.length > AGENT_CLIP ? a.slice(0, AGENT_CLIP) + "…" : a, "agent");
      chip.title = a;
      frag.appendChild(chip);
    }
    if (count > AGENTS_SHOWN) {
      const more = el("span", "+" + (count - AGENTS_SHOWN) + " more (" + count + " agents)", "muted");
      more.title = list.join("\n") + (count > list.length ? "\n…" : "");
      frag.appendChild(more);
    }
    return frag;
  }
  // more adds a row saying how many a list leaves out: the state lists
  // the first 100 providers (the withdrawn first), and keys cost a
  // stranger nothing.
  function more(rows, part, what, span) {
    if (!(part.total > part.list.length)) return;
    const td = el("td", "and " + (part.total - part.list.length) + " more " + what + " (" + part.total +
      " in all; the withdrawn first, then by key)", "muted");
    td.colSpan = span;
    const tr = el("tr", null, "more"); tr.appendChild(td); rows.push(tr);
  }
  let fingerprints = new Map(); // provider key -> fingerprint, from the last state
  function runAge(r) {
    if (!r) return "none";
    return r.runId + " · " + r.agentName + " on " + (fingerprints.get(r.providerKey) || shortKey(r.providerKey)) +
      " · " + (r.status === "queued" ? "waiting " : "running ") + dur(r.ageMs);
  }

  function render(s) {
    fingerprints = new Map();
    for (const p of s.providers.list.concat(s.quality.list)) if (p.fingerprint) fingerprints.set(p.key, p.fingerprint);
    const me = s.node;
    $("this-node").replaceChildren(el("span", me.id + " "), tag(me.role, me.role));
    const L = s.leader;
    $("leader").textContent = (L.leaseHolder || "nobody holds the lease") +
      (L.advertiseUrl && L.leaseHolder === L.nodeId ? " (" + L.advertiseUrl + ")" : "") +
      (L.nodeId && L.leaseHolder && L.nodeId !== L.leaseHolder ? " — epoch still held by " + L.nodeId : "");
    $("epoch").textContent = L.epoch;
    $("lease-left").textContent = L.leaseHolder ? dur(L.leaseLeftMs) + " of " + dur(L.leaseTtlMs) : "–";
    fill("nodes", s.nodes.map((n) => row([n.nodeId, tag(n.role, n.role), n.advertiseUrl, dur(n.seenAgoMs) + " ago"])),
      "no node has announced itself", 4);

    const roster = s.providers.source === "roster";
    $("providers-source").textContent = roster ? "(this node's roster)"
      : "(from the database: this node is a standby; capacity and in-flight counts are known only on the leader)";
    const providers = s.providers.list.map((p) => row([
      keyCell(p.key, p.fingerprint), p.name ? clip(p.name) : "–", agents(p.agents, p.agentCount),
      roster ? (p.unlimited ? "unlimited" : p.capacity) : "–",
      roster ? p.inFlight : "–", roster ? p.links : "–",
      p.withdrawn ? tag("withdrawn", "withdrawn") : tag("serving", "leader"),
    ], p.withdrawn ? "withdrawn" : ""));
    more(providers, s.providers, "providers", 7);
    fill("providers", providers, "no provider is connected", 7);

    // The active runs are counted exactly; the paused and ended ones pile
    // up without bound (retention is off by default), so the node passes on
    // PostgreSQL's estimate instead of reading the whole table every poll
    // (design.md §The operator console, "What the runs figures mean").
    const R = s.runs;
    const exact = ["queued", "offering", "running", "cancelling"].map((st) => {
      const r = row([st, R.byStatus[st] || 0, "exact"]); r.dataset.status = st; return r;
    });
    const estimated = ["input-required", "completed", "failed", "cancelled"].map((st) => {
      const n = R.estimated[st];
      const r = row([st, n === undefined ? "–" : "≈ " + n, "estimate"], "muted");
      r.dataset.status = st;
      r.title = n === undefined ? "not in PostgreSQL's statistics: none analyzed yet, or too few for its sample"
        : "PostgreSQL's estimate as of its last ANALYZE of the runs table";
      return r;
    });
    fill("runs", exact.concat(estimated), "", 3);
    $("runs-note").textContent = "Active runs (queued to cancelling) are counted exactly. Paused and ended runs are " +
      (R.estimatedTotal === null || R.estimatedTotal === undefined
        ? "not counted: PostgreSQL has no statistics of the runs table yet (or none since it was empty)."
        : "PostgreSQL's estimate" + (R.estimatedAt ? " (its sample as of " + new Date(R.estimatedAt).toLocaleString() + ")" : "") +
          ", about " + R.estimatedTotal + " runs stored in all; the exact figures would cost reading every run ever stored at each refresh.") +
      " Recent failures are counted exactly.";
    $("oldest-queued").textContent = runAge(s.runs.oldestQueued);
    $("longest-running").textContent = runAge(s.runs.longestRunning);

    $("failures-window").textContent = "(last " + dur(s.failures.windowMs) + ")";
    // Whose words a reason is, beside it: a provider may refuse in funduq's
    // own reason names, and the text alone would read as funduq's.
    const failures = s.failures.list.map((f) => row([clip(f.reason),
      f.by === "provider" ? tag("provider", "by-provider") : tag("funduq", "by-funduq"),
      f.count, new Date(f.last).toLocaleString()]));
    if (s.failures.omittedReasons > 0) {
      failures.push(row(["and " + s.failures.omittedReasons + " less frequent reasons", "", s.failures.omittedRuns, ""], "muted"));
    }
    fill("failures", failures, "no run failed in the window", 4);

    $("quality-tolerance").textContent = s.quality.tolerance > 0
      ? "(a counter at " + s.quality.tolerance + " withdraws a provider)" : "(withdrawal disabled)";
    const cs = ["misdeclared", "unanswered", "answered_late", "abandoned", "undelivered", "completions", "refused", "failed"];
    const quality = s.quality.list.map((q) => {
      const cells = [keyCell(q.key, q.fingerprint)];
      for (const c of cs) cells.push(q.counters[c] || 0);
      cells.push(q.withdrawn ? tag("withdrawn", "withdrawn") : "");
      return row(cells, q.withdrawn ? "withdrawn" : "");
    });
    more(quality, s.quality, "providers counted", 10);
    fill("quality", quality, "no counter recorded", 10);

    $("errors").textContent = s.errors.length ? "partly unavailable: " + s.errors.join("; ") : "";
  }

  let lastOK = 0;
  async function poll() {
    try {
      const res = await fetch("/console/api/state", { credentials: "same-origin", cache: "no-store" });
      if (res.status === 401) { window.location.reload(); return; }
      if (!res.ok) throw new Error("HTTP " + res.status);
      render(await res.json());
      lastOK = Date.now();
      $("status").textContent = "live · updated " + new Date(lastOK).toLocaleTimeString();
      $("status").className = "muted";
    } catch (e) {
      $("status").textContent = "cannot reach the node (" + e.message + ")" +
        (lastOK ? "; last update " + new Date(lastOK).toLocaleTimeString() : "");
      $("status").className = "bad";
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
