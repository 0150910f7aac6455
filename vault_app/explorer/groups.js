// Consumer groups: each group's position per stream and its lag, in bytes and in time, as a
// table and a bar chart (GET /api/streams/{s}/groups). Without a stream: every stream's groups.
import { enc, getJson } from "./api.js";
import { barChart } from "./chart.js";
import { bytes, count, duration, fill, h, time } from "./dom.js";
import { errorPanel } from "./panels.js";
import { streamTabs } from "./stream.js";

const PARALLEL = 4;

export async function groupsView(view, stream) {
  if (stream) {
    let doc;
    try {
      doc = await getJson(`streams/${enc(stream)}/groups`);
    } catch (err) {
      fill(view, errorPanel(err, `stream "${stream}"`));
      return null;
    }
    fill(view, h("h1", {}, stream), streamTabs(stream, "groups"), groupsPanel([doc], false));
    return null;
  }
  const streams = (await getJson("streams")).streams;
  const found = [];
  const box = h("div", {}, h("p", { class: "muted" }, `reading the groups of ${streams.length} streams…`));
  fill(view, h("h1", {}, "Consumer groups"), box);
  let stopped = false;
  const pending = streams.map((s) => s.stream);
  const worker = async () => {
    while (pending.length && !stopped) {
      const name = pending.shift();
      try {
        found.push(await getJson(`streams/${enc(name)}/groups`));
      } catch (err) {
        found.push({ stream: name, groups: [], error: err.message });
      }
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
  if (!stopped) {
    found.sort((a, b) => (a.stream < b.stream ? -1 : 1));
    fill(box, groupsPanel(found.filter((d) => d.groups.length || d.error), true));
  }
  return { stop: () => (stopped = true) };
}

function groupsPanel(docs, withStream) {
  const rows = docs.flatMap((d) => d.groups.map((g) => ({ ...g, stream: d.stream })));
  const errors = docs.filter((d) => d.error);
  if (!rows.length) {
    return h(
      "div",
      { class: "panel" },
      h("p", {}, "No consumer group has a checkpoint here."),
      h("p", { class: "muted" }, "Groups appear once a consumer commits a position (vault consume --group, docs/CLIENT.md) in the vault's storage account, table mvcheckpoints."),
      errors.map((d) => h("p", { class: "bad" }, `${d.stream}: ${d.error}`)),
    );
  }
  const label = (g) => (withStream ? `${g.group} · ${g.stream}` : g.group);
  return h(
    "div",
    {},
    h(
      "table",
      { class: "grid", id: "groups" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          withStream ? h("th", {}, "Stream") : null,
          h("th", {}, "Group"),
          h("th", {}, "Position"),
          h("th", {}, "Lag (bytes)"),
          h("th", {}, "Lag (time)"),
          h("th", {}, "Oldest unread"),
          h("th", {}, "Member"),
          h("th", {}, "Committed at"),
        ),
      ),
      h(
        "tbody",
        {},
        rows.map((g) =>
          h(
            "tr",
            { "data-group": g.group },
            withStream ? h("td", {}, h("a", { href: `#/streams/${enc(g.stream)}/groups` }, g.stream)) : null,
            h("td", {}, g.group),
            h("td", { class: "num" }, h("a", { href: `#/streams/${enc(g.stream)}?from=${g.offset}` }, count(g.offset))),
            h("td", { class: "num" + (g.lag_bytes ? " warn" : "") }, bytes(g.lag_bytes)),
            h("td", { class: "num" }, duration(g.lag_ms)),
            h("td", {}, time(g.first_unread_timestamp)),
            h("td", {}, g.member || "–"),
            h("td", {}, time(g.updated)),
          ),
        ),
      ),
    ),
    h("h2", {}, "Lag per group"),
    barChart(rows.map((g) => ({ label: label(g), value: g.lag_bytes, text: `${bytes(g.lag_bytes)} · ${duration(g.lag_ms)}` }))),
    errors.map((d) => h("p", { class: "bad" }, `${d.stream}: ${d.error}`)),
  );
}
