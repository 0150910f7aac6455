// Small SVG charts, drawn with elements (no library, no markup strings).
import { svg, time } from "./dom.js";

/** Per-second values of GET /streams/{s}/rates: one point per minute. */
export function perSecond(rates, field) {
  return rates.map((r) => ({ t: r.time, v: r[field] / r.seconds }));
}

/**
 * A line over time with a filled area, the peak marked in the title.
 * points: [{t, v}], oldest first. Returns an <svg> sized by CSS (viewBox scales).
 */
export function lineChart(points, { width = 240, height = 40, label = "", format = String, axes = false } = {}) {
  const pad = axes ? { l: 4, r: 4, t: 14, b: 14 } : { l: 1, r: 1, t: 2, b: 2 };
  const w = width - pad.l - pad.r;
  const hgt = height - pad.t - pad.b;
  const max = Math.max(0, ...points.map((p) => p.v));
  const scale = max > 0 ? hgt / max : 0;
  const step = points.length > 1 ? w / (points.length - 1) : 0;
  const xy = points.map((p, i) => [pad.l + i * step, pad.t + hgt - p.v * scale]);
  const line = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  const base = pad.t + hgt;
  const area = xy.length ? `${pad.l},${base} ${line} ${(pad.l + w).toFixed(1)},${base}` : "";
  const last = points.length ? points[points.length - 1].v : 0;
  const summary = `${label}: now ${format(last)}, peak ${format(max)}`;
  const chart = svg(
    "svg",
    {
      viewBox: `0 0 ${width} ${height}`,
      class: axes ? "chart chart-large" : "chart",
      role: "img",
      "aria-label": summary,
      preserveAspectRatio: axes ? null : "none",
    },
    svg("title", {}, summary),
    svg("line", { x1: pad.l, y1: base, x2: pad.l + w, y2: base, class: "chart-base" }),
    area && svg("polygon", { points: area, class: "chart-area" }),
    line && svg("polyline", { points: line, class: "chart-line" }),
  );
  if (axes && points.length) {
    chart.append(
      svg("text", { x: pad.l, y: 10, class: "chart-text" }, `${label} · peak ${format(max)}`),
      svg("text", { x: pad.l, y: height - 2, class: "chart-text" }, time(points[0].t).slice(11, 16) + "Z"),
      svg("text", { x: width - pad.r, y: height - 2, class: "chart-text chart-end" }, "now"),
    );
  }
  return chart;
}

/** Horizontal bars: items [{label, value, text}], the longest bar the largest value. */
export function barChart(items, { width = 640, row = 22 } = {}) {
  const labelWidth = 240;
  const max = Math.max(0, ...items.map((i) => i.value));
  const barSpace = width - labelWidth - 150;
  const chart = svg("svg", {
    viewBox: `0 0 ${width} ${Math.max(row, items.length * row)}`,
    class: "chart chart-bars",
    role: "img",
    "aria-label": "lag per consumer group",
  });
  items.forEach((item, i) => {
    const y = i * row;
    const len = max > 0 ? Math.max(item.value > 0 ? 2 : 0, (item.value / max) * barSpace) : 0;
    chart.append(
      svg("text", { x: 0, y: y + row * 0.7, class: "chart-text" }, item.label.length > 40 ? item.label.slice(0, 39) + "…" : item.label),
      svg("rect", { x: labelWidth, y: y + 4, width: len.toFixed(1), height: row - 8, class: "chart-bar" }),
      svg("text", { x: labelWidth + len + 6, y: y + row * 0.7, class: "chart-text" }, item.text),
    );
  });
  return chart;
}
