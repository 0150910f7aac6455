// Preloaded into Azurite (node --require) by vault_local/azurite.py, which keeps Azurite's
// metadata in its own files or in memory, never in a SQL database (AZURITE_DB unset). Azurite
// still requires the SQL stores' ORM, "sequelize", as it loads (its SQL blob and extent stores
// declare their models at load, as classes extending sequelize's Model) and never calls it
// without AZURITE_DB: with its dependencies, 0.15-0.25 CPU-s of an Azurite's start (1-1.3). A
// module with only a Model base class takes its place in Node's module cache before Azurite asks
// for it. With AZURITE_DB set, or an Azurite without that dependency, nothing is left out.
"use strict";
const fs = require("fs");
const path = require("path");

const azurite = path.dirname(fs.realpathSync(process.argv[1]));
let orm = null;
if (!process.env.AZURITE_DB) {
  try {
    orm = require.resolve("sequelize", { paths: [azurite] });
  } catch {
    // not installed: nothing to leave out
  }
}
if (orm !== null) {
  require.cache[orm] = { id: orm, filename: orm, loaded: true, exports: { Model: class Model {} } };
}
