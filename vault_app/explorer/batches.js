// Batches: look up a batch id (on a stream, or on whichever stream the caller may read) and see
// its status, its offsets or why it was rejected (GET /api/streams/{s}/batches/{id}, /api/batches/{id}).
import { ApiError, enc, getJson } from "./api.js";
import { count, fill, h, time } from "./dom.js";
import { errorPanel } from "./panels.js";

const MEANING = {
  staging: "a POST reserved the id; the batch is not confirmed to be in a queue yet",
  staged: "in a staging queue, waiting for the writer",
  committed: "in the stream",
  rejected: "the writer cannot append it; it is in the poison queue",
};

export async function batchesView(view, params) {
  const stream = h("input", { name: "stream", size: 24, placeholder: "any stream", value: params.get("stream") || "" });
  const id = h("input", { name: "batch", size: 48, placeholder: "batch id", value: params.get("id") || "", required: true });
  const result = h("div", { id: "batch" });
  const lookup = async () => {
    const s = stream.value.trim();
    const b = id.value.trim();
    if (!b) return;
    history.replaceState(null, "", `#/batches?${new URLSearchParams(s ? { stream: s, id: b } : { id: b })}`);
    fill(result, h("p", { class: "muted" }, "looking it up…"));
    try {
      const doc = await getJson(s ? `streams/${enc(s)}/batches/${enc(b)}` : `batches/${enc(b)}`);
      fill(result, batchPanel(doc));
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) {
        fill(result, h("div", { class: "panel" }, h("h2", {}, "Used on several streams"), h("p", {}, err.message), h("p", {}, "Give the stream to pick one.")));
      } else {
        fill(result, errorPanel(err, s ? `stream "${s}"` : "this batch"));
      }
    }
  };
  fill(
    view,
    h("h1", {}, "Batches"),
    h(
      "form",
      { class: "controls", onsubmit: (e) => (e.preventDefault(), lookup()) },
      h("label", {}, "Batch id ", id),
      h("label", {}, "Stream ", stream),
      h("button", {}, "Look up"),
    ),
    h("p", { class: "muted" }, "A POST answers with its batch_id; ids made from an Idempotency-Key start with key., others with auto."),
    result,
  );
  if (id.value) await lookup();
  return null;
}

function batchPanel(b) {
  const rows = [
    ["Stream", h("a", { href: `#/streams/${enc(b.stream)}` }, b.stream)],
    ["Messages", count(b.count)],
  ];
  if (b.first_offset !== undefined) {
    rows.push(["First offset", h("a", { href: `#/streams/${enc(b.stream)}?from=${b.first_offset}` }, String(b.first_offset))]);
    rows.push(["Next offset", String(b.next_offset)]);
  }
  if (b.timestamp !== undefined) rows.push(["Committed at", time(b.timestamp)]);
  if (b.reason) rows.push(["Reason", h("span", { class: "bad" }, b.reason)]);
  return h(
    "div",
    { class: "panel", "data-status": b.status },
    h("h2", {}, "Batch ", h("code", {}, b.batch_id), " ", h("span", { class: `badge ${b.status}` }, b.status)),
    h("p", { class: "muted" }, MEANING[b.status] || ""),
    h("table", { class: "facts" }, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))))),
  );
}
