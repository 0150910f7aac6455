// Calling the vault's API with the user's credential (docs/API.md).
//
// The credential is a function key (header x-functions-key) or a bearer token. It is kept in
// sessionStorage (this tab only, gone when it closes) and may arrive in the URL fragment
// (#key=... or #token=...), which browsers never send to a server, so it is in no server log;
// it is taken out of the address bar at once.

const STORE = "vault-explorer.credential";
export const API = new URL("../", import.meta.url); // the files are at /api/ui/, the API at /api/

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function takeCredentialFromFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#\/?/, ""));
  for (const kind of ["key", "token"]) {
    const value = params.get(kind);
    if (value) {
      setCredential(kind, value);
      history.replaceState(null, "", location.pathname + location.search + "#/");
      return true;
    }
  }
  return false;
}

export function credential() {
  try {
    return JSON.parse(sessionStorage.getItem(STORE) || "null");
  } catch {
    return null;
  }
}

export function setCredential(kind, value) {
  sessionStorage.setItem(STORE, JSON.stringify({ kind, value: value.trim() }));
}

export function clearCredential() {
  sessionStorage.removeItem(STORE);
}

function headers(accept) {
  const out = { Accept: accept };
  const c = credential();
  if (c && c.kind === "key") out["x-functions-key"] = c.value;
  if (c && c.kind === "token") out.Authorization = `Bearer ${c.value}`;
  return out;
}

export function url(path, params) {
  const u = new URL(path.replace(/^\//, ""), API);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== "") u.searchParams.set(k, String(v));
  }
  return u;
}

async function call(path, { params, signal, accept = "application/json" } = {}) {
  const response = await fetch(url(path, params), {
    headers: headers(accept),
    signal,
    cache: "no-store",
    credentials: "omit", // the credential travels in the headers above, never in cookies
  });
  if (!response.ok) {
    let doc = {};
    try {
      doc = await response.json();
    } catch {
      // not JSON (a proxy's page): the status says enough
    }
    throw new ApiError(response.status, doc.error || "http_" + response.status, doc.message || response.statusText);
  }
  return response;
}

export async function getJson(path, options) {
  return (await call(path, options)).json();
}

export async function getNdjson(path, options) {
  return (await call(path, { ...options, accept: "application/x-ndjson" })).blob();
}

export const enc = encodeURIComponent;
