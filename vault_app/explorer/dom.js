// Building the page: elements and text nodes only. Nothing here (or anywhere in the explorer)
// parses a string as markup, so a message that contains HTML is shown as the text it is.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
}

export function append(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace everything inside ``el``. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// -- formatting ---------------------------------------------------------------------------------
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${UNITS[i]}`;
}

export function count(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

/** Epoch milliseconds as UTC, the way the API documents time: 2026-01-02 03:04:05.678Z. */
export function time(ms) {
  if (ms === null || ms === undefined) return "–";
  return new Date(ms).toISOString().replace("T", " ");
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = ms / 1000;
  if (s < 1) return `${Math.round(ms)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

export function rate(n, unit) {
  if (!Number.isFinite(n)) return "–";
  if (unit === "B/s") return `${bytes(Math.round(n))}/s`;
  return `${n < 10 ? n.toFixed(2) : Math.round(n).toLocaleString("en-US")} ${unit}`;
}
