"""What ``python -m vault_local host`` checks before it imports the app.

Importing the app (the Functions library, the storage SDKs, uvicorn) takes about a CPU-second;
a worker count that is not allowed is known from the settings alone. So the command reads them
and checks the counts first (this module imports neither the app nor an SDK), and a wrong
setting is reported at once.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vault_local.workers import spare_workers, worker_settings


def load_local_settings(path: Path) -> dict[str, str]:
    """The ``Values`` of a local.settings.json, as ``func start`` puts them in the environment."""
    text = path.read_text() if path.is_file() else ""
    if not text.strip():
        return {}
    return {k: str(v) for k, v in json.loads(text).get("Values", {}).items()}


def check_worker_counts(settings_file: Path | None) -> None:
    """Exit with the reason if the worker settings (the environment's, else the settings
    file's, as :func:`vault_local.host.run` reads them) are not allowed."""
    env = {**(load_local_settings(settings_file) if settings_file else {}), **os.environ}
    try:
        processes, _ = worker_settings(env)
        spare_workers(env, processes)
    except ValueError as exc:
        sys.exit(f"vault_local host: {exc}")
