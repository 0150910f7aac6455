"""Running the vault on one machine: Azurite and a local Functions host (development only)."""
