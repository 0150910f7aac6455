// Panels shared by the views: what a failed call looks like to a person.
import { ApiError } from "./api.js";
import { h } from "./dom.js";

/** What a person should see for a failed call: 401 sign in, 403 no access, else the message. */
export function errorPanel(err, what = "this") {
  if (err instanceof ApiError && err.status === 401) {
    return h(
      "div",
      { class: "panel denied", "data-status": "401" },
      h("h2", {}, "Sign in needed"),
      h("p", {}, `The vault needs a credential to show ${what}: `, h("a", { href: "#/signin" }, "give a function key or a token"), "."),
      h("p", { class: "muted" }, err.message),
    );
  }
  if (err instanceof ApiError && err.status === 403) {
    return h(
      "div",
      { class: "panel denied", "data-status": "403" },
      h("h2", {}, "Access denied (403)"),
      h("p", {}, `Your credential may not read ${what}. Ask the vault's operator for the read permission.`),
      h("p", { class: "muted" }, err.message),
    );
  }
  if (err instanceof ApiError && err.status === 404) {
    return h("div", { class: "panel", "data-status": "404" }, h("h2", {}, "Not found"), h("p", {}, err.message));
  }
  const status = err instanceof ApiError ? ` (${err.status} ${err.code})` : "";
  return h("div", { class: "panel error" }, h("h2", {}, `Something failed${status}`), h("p", {}, String(err.message || err)));
}
