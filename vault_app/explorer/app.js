// The explorer's shell: the credential, the navigation and the router (URL fragment routes, so
// every view has a link: #/streams/orders?from=1234 opens that message for whoever may read it).
import { clearCredential, credential, getJson, setCredential, takeCredentialFromFragment } from "./api.js";
import { batchesView } from "./batches.js";
import { fill, h } from "./dom.js";
import { groupsView } from "./groups.js";
import { errorPanel } from "./panels.js";
import { streamView } from "./stream.js";
import { streamsView } from "./streams.js";

const main = document.getElementById("main");
const who = document.getElementById("who");
let current = null; // the view on screen: {stop()} ends its polling when another view opens
let shown = 0; // how many routes have opened: a view that finishes loading late is stopped

function parseRoute() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

async function route() {
  if (current && current.stop) current.stop();
  current = null;
  const mine = ++shown;
  const { parts, params } = parseRoute();
  markNav(parts[0] || "streams");
  const view = h("section", { class: "view" });
  fill(main, view);
  let handle = null;
  try {
    if (parts[0] === "signin") handle = signinView(view);
    else if (parts[0] === "batches") handle = await batchesView(view, params);
    else if (parts[0] === "groups") handle = await groupsView(view, null);
    else if (parts[0] === "streams" && parts[1] && parts[2] === "groups") handle = await groupsView(view, parts[1]);
    else if (parts[0] === "streams" && parts[1]) handle = await streamView(view, parts[1], params);
    else handle = await streamsView(view);
  } catch (err) {
    fill(view, errorPanel(err));
  }
  // Another route may have opened while this one loaded: then this view is off screen already.
  if (mine === shown) current = handle;
  else if (handle && handle.stop) handle.stop();
}

function markNav(name) {
  for (const link of document.querySelectorAll("nav a[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === name);
  }
}

async function showWho() {
  const c = credential();
  const label = c ? (c.kind === "key" ? "function key" : "bearer token") : "no credential";
  try {
    const doc = await getJson("whoami");
    const p = doc.principal;
    const name = p.kind === "anonymous" ? "anonymous" : `${p.kind} ${p.name || p.id || ""}`.trim();
    fill(who, h("span", { title: `read: ${doc.permissions.read.join(", ") || "nothing"}` }, name), " · ", h("a", { href: "#/signin" }, c ? "change" : "sign in"));
  } catch (err) {
    fill(who, h("span", { class: "bad" }, `${label} refused`), " · ", h("a", { href: "#/signin" }, "sign in"));
  }
}

function signinView(view) {
  const kind = h("select", { id: "cred-kind" }, h("option", { value: "key" }, "Function key (x-functions-key)"), h("option", { value: "token" }, "Bearer token (Entra ID)"));
  const value = h("input", { id: "cred-value", type: "password", autocomplete: "off", spellcheck: "false", placeholder: "paste it here" });
  const form = h(
    "form",
    {
      class: "panel",
      onsubmit: (e) => {
        e.preventDefault();
        if (value.value.trim()) setCredential(kind.value, value.value);
        showWho();
        location.hash = "#/streams";
      },
    },
    h("h2", {}, "Credential"),
    h("p", {}, "The explorer calls the vault's API with this credential; you see what it may read. It stays in this tab (sessionStorage) and is sent only to this vault."),
    h("label", {}, "Kind ", kind),
    h("label", {}, "Value ", value),
    h("div", { class: "buttons" }, h("button", { type: "submit" }, "Use it"), h("button", {
      type: "button",
      onclick: () => {
        clearCredential();
        showWho();
        location.hash = "#/streams";
      },
    }, "Forget the credential")),
  );
  fill(view, form);
  return null;
}

takeCredentialFromFragment();
window.addEventListener("hashchange", route);
showWho();
route();
