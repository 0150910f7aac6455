// The streams page: every stream the credential may read, sortable, each with its ingest rate
// over the last hour; and the staging queues, for admins (GET /api/streams has them only then).
import { enc, getJson } from "./api.js";
import { lineChart, perSecond } from "./chart.js";
import { bytes, count, fill, h, rate, time } from "./dom.js";

const COLUMNS = [
  { key: "stream", label: "Stream", value: (s) => s.stream },
  { key: "committed", label: "Size", value: (s) => s.committed },
  { key: "count", label: "Messages", value: (s) => s.count },
  { key: "first_timestamp", label: "First message", value: (s) => s.first_timestamp ?? -1 },
  { key: "last_timestamp", label: "Last message", value: (s) => s.last_timestamp ?? -1 },
  { key: "hour", label: "Last hour", value: (s) => (s.rates ? s.rates.reduce((n, r) => n + r.messages, 0) : -1) },
];
const PARALLEL = 4; // rate requests in flight: a page of many streams must not flood the app

export async function streamsView(view) {
  const doc = await getJson("streams");
  const streams = doc.streams;
  let sort = { key: "stream", dir: 1 };
  const table = h("table", { class: "grid", id: "streams" });
  const shown = new Map(); // stream name -> its row on the page
  const render = () => {
    const col = COLUMNS.find((c) => c.key === sort.key);
    const rows = [...streams].sort((a, b) => {
      const x = col.value(a);
      const y = col.value(b);
      return (x < y ? -1 : x > y ? 1 : 0) * sort.dir;
    });
    fill(
      table,
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          COLUMNS.map((c) =>
            h(
              "th",
              {
                class: "sortable" + (c.key === sort.key ? (sort.dir > 0 ? " asc" : " desc") : ""),
                "aria-sort": c.key === sort.key ? (sort.dir > 0 ? "ascending" : "descending") : "none",
                onclick: () => {
                  sort = { key: c.key, dir: c.key === sort.key ? -sort.dir : c.key === "stream" ? 1 : -1 };
                  render();
                },
              },
              c.label,
            ),
          ),
        ),
      ),
      h("tbody", {}, rows.map(shownRow)),
    );
  };
  const shownRow = (s) => {
    const tr = row(s);
    shown.set(s.stream, tr);
    return tr;
  };
  // A stream's rates change its own row only, unless the table is sorted by them: redrawing the
  // whole table for each answer made a page of N streams build N² rows (200: a minute of CPU).
  let redraw = null;
  const ratesArrived = (s) => {
    if (sort.key !== "hour") {
      shown.get(s.stream).replaceWith(shownRow(s));
    } else if (redraw === null) {
      redraw = requestAnimationFrame(() => {
        redraw = null;
        render();
      });
    }
  };
  fill(
    view,
    h("h1", {}, "Streams"),
    streams.length
      ? h("p", { class: "muted" }, `${streams.length} stream${streams.length === 1 ? "" : "s"} you may read. Click a column to sort.`)
      : h("div", { class: "panel" }, "There is no stream you may read."),
    streams.length ? table : null,
    doc.queues ? queues(doc.queues) : null,
  );
  render();
  let stopped = false;
  const pending = [...streams];
  const worker = async () => {
    while (pending.length && !stopped) {
      const s = pending.shift();
      try {
        s.rates = (await getJson(`streams/${enc(s.stream)}/rates`, { params: { minutes: 60 } })).rates;
      } catch (err) {
        s.ratesError = err.message;
      }
      if (!stopped) ratesArrived(s);
    }
  };
  Promise.all(Array.from({ length: PARALLEL }, worker));
  return { stop: () => (stopped = true) };
}

function row(s) {
  return h(
    "tr",
    { "data-stream": s.stream },
    h("td", {}, h("a", { href: `#/streams/${enc(s.stream)}` }, s.stream)),
    h("td", { class: "num" }, bytes(s.committed)),
    h("td", { class: "num" }, count(s.count)),
    h("td", {}, time(s.first_timestamp)),
    h("td", {}, time(s.last_timestamp)),
    h("td", { class: "rates" }, rates(s)),
  );
}

function rates(s) {
  if (s.ratesError) return h("span", { class: "muted" }, s.ratesError);
  if (!s.rates) return h("span", { class: "muted" }, "…");
  const msgs = perSecond(s.rates, "messages");
  const size = perSecond(s.rates, "bytes");
  const total = s.rates.reduce((n, r) => n + r.messages, 0);
  return h(
    "div",
    { class: "spark" },
    h("div", {}, lineChart(msgs, { label: "messages/s", format: (v) => rate(v, "msg/s") }), h("span", {}, rate(Math.max(0, ...msgs.map((p) => p.v)), "msg/s"), " peak")),
    h("div", {}, lineChart(size, { label: "bytes/s", format: (v) => rate(v, "B/s") }), h("span", {}, rate(Math.max(0, ...size.map((p) => p.v)), "B/s"), " peak")),
    h("span", { class: "muted hour-total" }, `${count(total)} in the last hour`),
  );
}

function queues(list) {
  return h(
    "section",
    { id: "queues" },
    h("h2", {}, "Staging queues"),
    h("p", { class: "muted" }, "Batches waiting for the writer, and batches it could not append (poison). Shown to admins of every stream."),
    h(
      "table",
      { class: "grid narrow" },
      h("thead", {}, h("tr", {}, h("th", {}, "Account"), h("th", {}, "Queue"), h("th", {}, "Waiting"), h("th", {}, "Poison"))),
      h(
        "tbody",
        {},
        list.map((q) =>
          h(
            "tr",
            {},
            h("td", { class: "num" }, q.account),
            h("td", {}, q.queue),
            h("td", { class: "num" }, count(q.approximate_messages)),
            h("td", { class: "num" + (q.poison_messages ? " bad" : "") }, count(q.poison_messages)),
          ),
        ),
      ),
    ),
  );
}
