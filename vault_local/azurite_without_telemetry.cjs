// Preloaded into Azurite (node --require) by vault_local/azurite.py, which always runs it with
// --disableTelemetry. Azurite still requires its telemetry client, "applicationinsights", as it
// loads (common/Telemetry.js) and never uses it with telemetry off: that package and the
// OpenTelemetry SDK it brings are most of Azurite's start, about 2 of its 3 CPU-s. An empty
// module takes its place in Node's module cache before Azurite asks for it. An Azurite without
// that dependency is left as it is.
"use strict";
const fs = require("fs");
const path = require("path");

const azurite = path.dirname(fs.realpathSync(process.argv[1]));
let client = null;
try {
  client = require.resolve("applicationinsights", { paths: [azurite] });
} catch {
  // not installed: nothing to leave out
}
if (client !== null) {
  require.cache[client] = { id: client, filename: client, loaded: true, exports: {} };
}
