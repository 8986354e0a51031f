// The console: this node's HTTP API (/v1/...) read every half second, and its watch stream.
// Plain script, no build step: what the browser runs is this file.
"use strict";

const MEMBERS_EVERY_MS = 500;
const LEASES_EVERY_MS = 1000;
const PAGE = 100;
const KEPT_EVENTS = 200;
const TIMELINE_MS = 60000;

const $ = (id) => document.getElementById(id);
const num = (v) => Number(v || 0);

// How long a call of this page's node may take before the node counts as not answering (a
// paused node never answers, and never fails).
const CALL_TIMEOUT_MS = 3000;

// A call of the HTTP API: its answer, or an Error with the node's message. An Error marked
// `unanswered` says that nothing answered at all: the node is gone, paused or cut off.
async function api(rpc, body) {
  let response;
  try {
    response = await fetch(`/v1/${rpc}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body || {}),
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    });
  } catch (e) {
    const unanswered = new Error(`nothing answers at ${location.host} (${rpc}): what the page shows is as last read`);
    unanswered.unanswered = true;
    throw unanswered;
  }
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer.message || `${rpc}: HTTP ${response.status}`);
  return answer;
}

function showError(error) {
  $("error").hidden = !error;
  $("error").textContent = error ? String(error.message || error) : "";
}

// Cell `i` of `row`, made when missing.
function slot(row, i) {
  while (row.cells.length <= i) row.insertCell();
  return row.cells[i];
}

// Sets cell `i` of `row`, touching the page only where it changed.
function cell(row, i, text, className) {
  const td = slot(row, i);
  if (td.textContent !== String(text)) td.textContent = text;
  if (td.className !== (className || "")) td.className = className || "";
  return td;
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(1)} s`;
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(1)} GiB`;
}

// A node's disk: what is free of the whole, and the share, marked low under a tenth (as the
// alert rules in deploy/ warn); "-" where it is not known (an unreachable node gives 0 of 0).
function disk(node) {
  const free = num(node.diskFreeBytes);
  const size = num(node.diskSizeBytes);
  if (!size) return ["-", "num"];
  const share = free / size;
  return [`${bytes(free)} of ${bytes(size)} (${Math.round(share * 100)}%)`, share < 0.1 ? "odd" : "num"];
}

// ---- Members ---------------------------------------------------------------------------

const lastContact = new Map(); // node id -> when it last answered, on this browser's clock
const addresses = new Map(); // node id -> its client address, kept while it is unreachable
let control = null; // the local cluster's supervisor, when this node runs under `cluster`
let leader = null; // { id, term } as last seen

function roleName(role) {
  return String(role || "ROLE_UNSPECIFIED").replace("ROLE_", "").toLowerCase();
}

let refreshing = false; // one read of the members at a time, however slow the node
async function refreshMembers() {
  if (refreshing) return;
  refreshing = true;
  try {
    const status = await api("Status");
    if (control) control = await fetch("/ui/control").then((r) => r.json()).catch(() => control);
    renderMembers(status.nodes || []);
    showError(null);
    showElsewhere(false);
    $("updated").textContent = `read ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    showError(e);
    showElsewhere(Boolean(e.unanswered));
  } finally {
    refreshing = false;
  }
}

// The other members' consoles, linked while this page's own node does not answer: each node
// names where it serves HTTP (`httpAddress`), and this page calls its own node only.
const consoles = new Map(); // node id -> host:port of its console
function showElsewhere(gone) {
  const others = [...consoles].filter(([, at]) => at !== location.host);
  const box = $("elsewhere");
  box.hidden = !gone || !others.length;
  if (box.hidden) return;
  const links = others.map(([id, at]) => {
    const a = document.createElement("a");
    a.href = `${location.protocol}//${at}/ui`;
    a.textContent = `node ${id}`;
    return a;
  });
  box.replaceChildren("This page's node does not answer. The other members' consoles: ");
  links.forEach((a, i) => box.append(...(i ? [", ", a] : [a])));
}

function health(node) {
  const state = control && control.nodes && control.nodes[node.id];
  if (state === "killed" || state === "exited") return "down";
  if (state === "paused") return "paused";
  return roleName(node.role) === "unreachable" ? "unreachable" : "up";
}

// Rows are kept and updated in place, by node id: a button re-made under the pointer twice a
// second would lose the click.
function renderMembers(nodes) {
  const body = $("members").tBodies[0];
  const now = Date.now();
  const ids = new Set(nodes.map((n) => String(num(n.id))));
  for (const row of [...body.rows]) if (!ids.has(row.dataset.node)) row.remove();
  let seenLeader = null;
  for (const node of nodes) {
    const id = num(node.id);
    const role = roleName(node.role);
    const state = health(node);
    if (role !== "unreachable") lastContact.set(id, now);
    if (role === "leader" && state === "up") seenLeader = { id, term: num(node.term) };
    let row = body.querySelector(`tr[data-node="${id}"]`);
    if (!row) {
      row = body.insertRow();
      row.dataset.node = id;
    }
    row.dataset.role = state === "up" ? role : state;
    row.className = role === "leader" && state === "up" ? "leader" : "";
    cell(row, 0, id, "num");
    if (node.address) addresses.set(id, node.address);
    if (node.httpAddress) consoles.set(id, node.httpAddress);
    row.dataset.self = String(consoles.get(id) === location.host);
    cell(row, 1, addresses.get(id) || "");
    cell(row, 2, state === "up" ? role : "-", `role-${role}`);
    cell(row, 3, num(node.term), "num");
    cell(row, 4, `${num(node.lastLogIndex)} / ${num(node.appliedIndex)}`, "num");
    const contact = lastContact.get(id);
    cell(row, 5, contact === undefined ? "never" : `${seconds(now - contact)} ago`, "num");
    cell(row, 6, state === "unreachable" && node.error ? `unreachable: ${node.error}` : state, `health-${state}`);
    const ratio = Number(node.clockRateRatio || 0);
    const clock = ratio ? `${ratio.toFixed(2)}x` : "-";
    cell(row, 7, node.clockOdd ? `${clock} odd: ${node.clockOddReason}` : clock, node.clockOdd ? "odd" : "num");
    cell(row, 8, bytes(num(node.snapshotBytes)), "num");
    cell(row, 9, ...disk(node));
    cell(row, 10, num(node.leases), "num");
    if (control && control.available) controls(slot(row, 11), id, state);
  }
  if (seenLeader && (!leader || leader.id !== seenLeader.id || leader.term !== seenLeader.term)) {
    if (leader) leaderChanged(seenLeader);
    leader = seenLeader;
  }
  $("served-by").textContent = nodes.length ? `${nodes.length} members` : "";
}

// Kill, pause, resume and restart buttons for a node of a local cluster, made again only when
// the node's state changes which of them apply.
function controls(td, id, state) {
  const actions = state === "down" ? ["restart"] : state === "paused" ? ["resume", "kill"] : ["kill", "pause", "restart"];
  if (td.dataset.actions === actions.join()) return;
  td.dataset.actions = actions.join();
  td.replaceChildren();
  for (const action of actions) {
    const button = document.createElement("button");
    button.textContent = action;
    button.dataset.action = action;
    button.onclick = async () => {
      button.disabled = true;
      const r = await fetch(`/ui/control/${id}/${action}`, { method: "POST" });
      if (!r.ok) showError(new Error((await r.json().catch(() => ({}))).message || `${action}: HTTP ${r.status}`));
      button.disabled = false;
      refreshMembers();
    };
    td.appendChild(button);
  }
}

// ---- Leases ----------------------------------------------------------------------------

let pageToken = ""; // where the page shown starts
let nextToken = "";
let leasesAsked = 0; // the last read asked for: an older one's answer is dropped
let leasesReading = null; // the read in flight, if any
let leasesAgain = false; // another read is wanted once it ends
let leasesRead = { leases: [] };
// Store time moves only with logged commands, so a read of an idle cluster names the time of
// its last one: the page's estimate runs on from each read by this browser's clock and takes
// a later store time when a read brings one, so that time left only ever falls.
let storeClock = { ms: 0, at: 0 };

function storeNow() {
  return storeClock.ms + (performance.now() - storeClock.at);
}

// Reads the page of leases shown: one read at a time, however many events ask for it, and
// another once it ends if any did meanwhile.
function refreshLeases() {
  if (leasesReading) {
    leasesAgain = true;
    return;
  }
  leasesReading = readLeases().finally(() => {
    leasesReading = null;
    if (leasesAgain) {
      leasesAgain = false;
      refreshLeases();
    }
  });
}

async function readLeases() {
  const asked = ++leasesAsked;
  try {
    const prefix = $("prefix").value;
    const answer = await api("ListLeases", { page: { prefix, pageToken, limit: PAGE } });
    // The prefix or the page changed while it was read: the read made for them will show it.
    if (asked !== leasesAsked || prefix !== $("prefix").value) return;
    leasesRead = { leases: answer.leases || [] };
    const read = num(answer.applied && answer.applied.storeTimeMs);
    storeClock = { ms: Math.max(storeClock.at ? storeNow() : 0, read), at: performance.now() };
    nextToken = answer.nextPageToken || "";
    $("next-page").disabled = !nextToken;
    renderLeases();
  } catch (e) {
    showError(e);
  }
}

// Time left counts down between reads, from the store time of the last one. Rows are kept and
// updated in place, by lease name, as the members' are: this runs ten times a second, and a row
// re-made that often would lose a selection of its text, or anything else holding on to it.
function renderLeases() {
  const body = $("leases").tBodies[0];
  const now = storeNow();
  const rows = new Map([...body.rows].map((row) => [row.dataset.lease, row]));
  const names = new Set(leasesRead.leases.map((lease) => lease.lease));
  for (const [name, row] of rows) if (!names.has(name)) row.remove();
  leasesRead.leases.forEach((lease, i) => {
    let row = rows.get(lease.lease);
    if (!row) {
      row = document.createElement("tr");
      row.dataset.lease = lease.lease;
    }
    // In the read's order.
    if (body.rows[i] !== row) body.insertBefore(row, body.rows[i] || null);
    cell(row, 0, lease.lease);
    cell(row, 1, lease.holder || "(free)", lease.holder ? "" : "quiet");
    cell(row, 2, num(lease.token), "num");
    const left = num(lease.expiresAtMs) - now;
    cell(row, 3, lease.holder && left > 0 ? seconds(left) : "-", "num time-left");
    cell(row, 4, num(lease.fence), "num");
  });
  const shown = leasesRead.leases.length;
  $("lease-count").textContent = `${shown} on this page${nextToken ? ", more follow" : ""}`;
}

// ---- Events ----------------------------------------------------------------------------

const marks = []; // { at, kind } for the timeline

function addEvent(text, className, kind) {
  const item = document.createElement("li");
  item.textContent = `${new Date().toLocaleTimeString()}  ${text}`;
  if (className) item.className = className;
  const list = $("events");
  list.prepend(item);
  while (list.children.length > KEPT_EVENTS) list.lastChild.remove();
  marks.push({ at: Date.now(), kind });
}

function leaderChanged(now) {
  addEvent(`node ${now.id} leads (term ${now.term})`, "leader-change", "leader");
}

function eventKind(kind) {
  return String(kind || "").replace("EVENT_KIND_", "").toLowerCase();
}

// The watch of every lease, resumed after the last entry seen when the stream ends.
async function watch() {
  let from = 0;
  for (;;) {
    try {
      const response = await fetch("/v1/Watch", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prefix: "", fromIndex: from }),
      });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffered = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffered.indexOf("\n")) >= 0) {
          const line = JSON.parse(buffered.slice(0, end));
          buffered = buffered.slice(end + 1);
          if (line.message) throw new Error(line.message);
          for (const e of line.events || []) {
            const kind = eventKind(e.kind);
            addEvent(`${kind} ${e.lease} ${e.holder} token ${num(e.token)} at index ${num(e.logIndex)}`, "", kind);
          }
          // A lease changed: the page of leases is read again at once, not at its next turn.
          if ((line.events || []).length) refreshLeases();
          if (line.watchedTo) from = num(line.watchedTo) + 1;
        }
      }
    } catch (e) {
      addEvent(`watch: ${e.message}; resuming`, "quiet", "error");
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

const COLORS = { granted: "#15803d", renewed: "#a1a1aa", released: "#71717a", expired: "#b45309", leader: "#2563eb", error: "#b91c1c" };

function renderTimeline() {
  const svg = $("timeline");
  const now = Date.now();
  while (marks.length && now - marks[0].at > TIMELINE_MS) marks.shift();
  const shapes = marks.map((m) => {
    const x = Math.min(597, 600 - ((now - m.at) / TIMELINE_MS) * 600);
    const color = COLORS[m.kind] || "#52525b";
    return m.kind === "leader"
      ? `<line x1="${x}" x2="${x}" y1="0" y2="24" stroke="${color}" stroke-width="3"/>`
      : `<rect x="${x - 1}" y="6" width="3" height="12" fill="${color}"/>`;
  });
  svg.innerHTML = shapes.join("");
}

// ---- Start -----------------------------------------------------------------------------

async function start() {
  const info = await fetch("/ui/control").then((r) => r.json()).catch(() => null);
  control = info && info.available ? info : null;
  $("open-warning").hidden = !(info && !info.tls);
  document.querySelectorAll("th.control").forEach((th) => (th.hidden = !control));
  $("first-page").onclick = () => { pageToken = ""; refreshLeases(); };
  $("next-page").onclick = () => { pageToken = nextToken; refreshLeases(); };
  $("prefix").oninput = () => { pageToken = ""; refreshLeases(); };
  $("lease-filter").onsubmit = (e) => e.preventDefault();
  refreshMembers();
  refreshLeases();
  setInterval(refreshMembers, MEMBERS_EVERY_MS);
  setInterval(refreshLeases, LEASES_EVERY_MS);
  setInterval(renderLeases, 100);
  setInterval(renderTimeline, 250);
  watch();
}

start();
