// The stream page: the message browser (seek by offset or time, page forward and back), a live
// tail that follows new messages with long polls, a link to every message, and NDJSON downloads.
import { enc, getJson, getNdjson } from "./api.js";
import { lineChart, perSecond } from "./chart.js";
import { bytes, count, fill, h, rate, time } from "./dom.js";
import { errorPanel } from "./panels.js";

const SHOWN_CHARS = 20000; // of one value: a 1 MiB value would make the page crawl; download it
const SHOWN_BYTES = 4096; // of a binary value, as hex
const TAIL_KEEP = 500; // messages kept on screen while following
const TAIL_WAIT = 20; // seconds per long poll (the API allows 60)
const MAX_DOWNLOAD = 10000; // messages per download: the API's limit per request
let trail = { stream: null, starts: [] }; // offsets of the pages before this one, for "Previous"

export function streamTabs(name, active) {
  return h(
    "div",
    { class: "tabs" },
    h("a", { href: `#/streams/${enc(name)}`, class: active === "messages" ? "active" : "" }, "Messages"),
    h("a", { href: `#/streams/${enc(name)}/groups`, class: active === "groups" ? "active" : "" }, "Consumer groups"),
  );
}

export async function streamView(view, name, params) {
  let info;
  try {
    info = await getJson(`streams/${enc(name)}`);
  } catch (err) {
    fill(view, errorPanel(err, `stream "${name}"`));
    return null;
  }
  if (trail.stream !== name) trail = { stream: name, starts: [] };
  const state = {
    limit: Math.min(1000, Math.max(1, Number(params.get("limit")) || 50)),
    target: params.has("from") ? Number(params.get("from")) : null,
    page: null,
    following: null, // the AbortController of the live tail while it runs
  };
  const charts = h("div", { class: "charts" }, h("span", { class: "muted" }, "loading the ingest rate…"));
  const list = h("div", { class: "messages", id: "messages" });
  const status = h("p", { class: "status", role: "status", "aria-live": "polite" });
  const offsetInput = h("input", { name: "offset", inputmode: "numeric", size: 14, placeholder: "offset", value: state.target ?? "" });
  const timeInput = h("input", { name: "at", size: 24, placeholder: "2026-01-02T03:04:05Z or ms", value: params.get("at") || "" });
  const sizeSelect = h("select", { name: "limit" }, [20, 50, 100, 500].map((n) => h("option", { value: n, selected: n === state.limit }, `${n} per page`)));
  const prev = h("button", { type: "button", onclick: () => previous() }, "◀ Previous");
  const next = h("button", { type: "button", onclick: () => forward() }, "Next ▶");
  const follow = h("button", { type: "button", class: "follow", onclick: () => (state.following ? pause() : tail()) }, "Follow live");
  const dlFrom = h("input", { name: "download-from", inputmode: "numeric", size: 12 });
  const dlCount = h("input", { name: "download-count", inputmode: "numeric", size: 6, value: 1000 });

  fill(
    view,
    h("h1", {}, name),
    streamTabs(name, "messages"),
    h(
      "p",
      { class: "facts" },
      `${bytes(info.committed)} · ${count(info.count)} messages · first ${time(info.first_timestamp)} · last ${time(info.last_timestamp)}`,
    ),
    charts,
    h(
      "div",
      { class: "controls" },
      h("form", { onsubmit: (e) => (e.preventDefault(), go({ from: offsetInput.value.trim() || 0 })) }, h("label", {}, "Offset ", offsetInput), h("button", {}, "Go")),
      h("form", { onsubmit: (e) => (e.preventDefault(), timeInput.value.trim() && go({ at: timeInput.value.trim() })) }, h("label", {}, "Time ", timeInput), h("button", {}, "Seek")),
      sizeSelect,
    ),
    h("div", { class: "controls" }, h("button", { type: "button", onclick: () => go({ from: 0 }) }, "« Start"), prev, next, follow),
    status,
    list,
    h(
      "form",
      { class: "controls download", onsubmit: (e) => (e.preventDefault(), download()) },
      h("label", {}, "Download from offset ", dlFrom),
      h("label", {}, " messages ", dlCount),
      h("button", {}, "Download NDJSON"),
    ),
  );
  sizeSelect.addEventListener("change", () => {
    state.limit = Number(sizeSelect.value);
    go({ from: state.page ? state.page.start : 0 }, { keepTrail: true });
  });

  loadRates(name, charts);
  await go(params.has("at") ? { at: params.get("at") } : { from: state.target ?? 0 }, { keepTrail: true, first: true });
  return { stop: pause };

  // -- paging ------------------------------------------------------------------------------------
  async function go(where, { keepTrail = false, first = false } = {}) {
    pause();
    if (!keepTrail) trail.starts = [];
    if (first) trail.starts = trail.starts.filter((o) => where.from === undefined || o < Number(where.from));
    status.textContent = "loading…";
    let doc;
    try {
      doc = await getJson(`streams/${enc(name)}/messages`, { params: { ...where, limit: state.limit } });
    } catch (err) {
      status.textContent = "";
      fill(list, errorPanel(err, `stream "${name}"`));
      return;
    }
    const start = doc.messages.length ? doc.messages[0].offset : where.from !== undefined ? Number(where.from) : doc.next_offset;
    state.page = { start, next: doc.next_offset, committed: doc.committed };
    fill(list, doc.messages.map((m) => message(name, m, m.offset === state.target)));
    offsetInput.value = start;
    dlFrom.value = start;
    const shown = doc.messages.length;
    status.textContent = shown
      ? `offsets ${start} to ${doc.next_offset} of ${doc.committed} committed`
      : `no messages from offset ${start} (the stream ends at ${doc.committed})`;
    history.replaceState(null, "", `#/streams/${enc(name)}?from=${start}` + (state.limit !== 50 ? `&limit=${state.limit}` : ""));
    buttons();
  }

  function buttons() {
    prev.disabled = !trail.starts.length;
    next.disabled = !state.page || state.page.next >= state.page.committed;
  }

  function forward() {
    if (!state.page) return;
    trail.starts.push(state.page.start);
    state.target = null;
    go({ from: state.page.next }, { keepTrail: true });
  }

  function previous() {
    if (!trail.starts.length) return;
    state.target = null;
    go({ from: trail.starts.pop() }, { keepTrail: true });
  }

  // -- the live tail -------------------------------------------------------------------------------
  async function tail() {
    const ctrl = new AbortController();
    state.following = ctrl;
    follow.textContent = "Pause";
    follow.classList.add("on");
    prev.disabled = next.disabled = true;
    let from = state.page ? state.page.next : 0;
    if (state.page && state.page.next < state.page.committed) {
      from = state.page.committed; // far behind: follow what arrives from now on
      fill(list);
    }
    while (state.following === ctrl) {
      status.textContent = `following: waiting for messages after offset ${from}…`;
      try {
        const doc = await getJson(`streams/${enc(name)}/messages`, { params: { from, wait: TAIL_WAIT, limit: 200 }, signal: ctrl.signal });
        if (state.following !== ctrl) break;
        for (const m of doc.messages) list.append(message(name, m, false, true));
        while (list.childElementCount > TAIL_KEEP) list.firstElementChild.remove();
        from = doc.next_offset;
        state.page = { start: state.page ? state.page.start : 0, next: from, committed: doc.committed };
      } catch (err) {
        if (state.following !== ctrl) break;
        status.textContent = `the tail stopped: ${err.message}`;
        if (err.status === 401 || err.status === 403) return pause(true);
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }

  function pause(keepStatus = false) {
    if (!state.following) return;
    state.following.abort();
    state.following = null;
    follow.textContent = "Follow live";
    follow.classList.remove("on");
    if (!keepStatus && state.page) status.textContent = `paused at offset ${state.page.next}`;
    buttons();
  }

  // -- download ------------------------------------------------------------------------------------
  async function download() {
    const from = Number(dlFrom.value) || 0;
    const n = Math.min(MAX_DOWNLOAD, Math.max(1, Number(dlCount.value) || 1000));
    status.textContent = `downloading up to ${n} messages from offset ${from}…`;
    try {
      const blob = await getNdjson(`streams/${enc(name)}/messages`, { params: { from, limit: n, max_bytes: 16777216 } });
      const link = h("a", { href: URL.createObjectURL(blob), download: `${name}-${from}.ndjson` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10000);
      status.textContent = `downloaded ${name}-${from}.ndjson (${bytes(blob.size)})`;
    } catch (err) {
      status.textContent = `download failed: ${err.message}`;
    }
  }
}

async function loadRates(name, box) {
  try {
    const doc = await getJson(`streams/${enc(name)}/rates`, { params: { minutes: 60 } });
    const opts = { width: 480, height: 110, axes: true };
    fill(
      box,
      lineChart(perSecond(doc.rates, "messages"), { ...opts, label: "messages/s", format: (v) => rate(v, "msg/s") }),
      lineChart(perSecond(doc.rates, "bytes"), { ...opts, label: "bytes/s", format: (v) => rate(v, "B/s") }),
    );
  } catch (err) {
    fill(box, h("span", { class: "muted" }, `no ingest rate: ${err.message}`));
  }
}

// -- one message ---------------------------------------------------------------------------------
function message(stream, m, target, fresh = false) {
  const link = `${location.origin}${location.pathname}#/streams/${enc(stream)}?from=${m.offset}`;
  return h(
    "article",
    { class: "msg" + (target ? " target" : "") + (fresh ? " fresh" : ""), "data-offset": m.offset },
    h(
      "header",
      {},
      h("span", { class: "offset" }, `offset ${m.offset}`),
      h("span", {}, time(m.timestamp)),
      h("span", { class: "id", title: "message id" }, m.id),
      m.key !== "" ? h("span", { class: "key" }, "key ", h("code", {}, m.key_encoding === "base64" ? hexString(m.key) : m.key)) : null,
      h("a", { href: link, class: "link", title: "a link to this message" }, "link"),
      h("button", { type: "button", class: "copy", onclick: (e) => copy(link, e.target) }, "copy link"),
    ),
    value(m),
  );
}

function value(m) {
  if (m.value_encoding === "base64") {
    const pre = h("pre", { class: "value binary" }, hex(m.value, SHOWN_BYTES));
    let showingHex = true;
    const toggle = h("button", {
      type: "button",
      class: "small",
      onclick: () => {
        showingHex = !showingHex;
        pre.textContent = showingHex ? hex(m.value, SHOWN_BYTES) : m.value;
        toggle.textContent = showingHex ? "show base64" : "show hex";
      },
    }, "show base64");
    return h("div", {}, h("span", { class: "kind" }, `binary, ${bytes(rawLength(m.value))}`), toggle, pre);
  }
  let text = m.value;
  let kind = "text";
  const trimmed = text.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      text = JSON.stringify(JSON.parse(trimmed), null, 2);
      kind = "JSON";
    } catch {
      // not JSON after all: shown as it is
    }
  }
  const cut = text.length > SHOWN_CHARS;
  return h(
    "div",
    {},
    h("span", { class: "kind" }, kind),
    h("pre", { class: "value" }, cut ? text.slice(0, SHOWN_CHARS) : text),
    cut ? h("p", { class: "muted" }, `… ${count(text.length - SHOWN_CHARS)} more characters: download the range to see all`) : null,
  );
}

function rawLength(b64) {
  return Math.floor((b64.length * 3) / 4) - (b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0);
}

/** A hex dump of base64 data: offset, 16 bytes in hex, the printable ASCII. */
function hex(b64, limit) {
  const raw = atob(b64);
  const lines = [];
  for (let i = 0; i < Math.min(raw.length, limit); i += 16) {
    const chunk = raw.slice(i, i + 16);
    const hexes = [...chunk].map((c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ");
    const ascii = [...chunk].map((c) => (c >= " " && c <= "~" ? c : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hexes.padEnd(47)}  ${ascii}`);
  }
  if (raw.length > limit) lines.push(`… ${raw.length - limit} more bytes`);
  return lines.join("\n");
}

/** A short binary key as one run of hex digits. */
function hexString(b64) {
  return [...atob(b64)].map((c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("");
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "copied";
  } catch {
    window.prompt("Copy the link:", text); // no clipboard (plain HTTP, or refused): let the user copy it
  }
}
