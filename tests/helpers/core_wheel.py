"""The core's wheel installed alone into a clean virtualenv, beside exactly what it declares.

:func:`install_alone` builds the wheel from vault_core's sources (or takes the one built before
from the same bytes), and a virtualenv that sees nothing of this checkout or its venv: its own
site-packages, holding the wheel, and the dependencies pip installed for the wheel's
declarations (a .pth file adds their directory to its path). tests/test_spark.py reads a stream
with Spark's Python processes running in it.

What pip makes is kept between runs in ``~/.cache/message-vault/core-wheel/``, as pip keeps its
downloads: the wheel, one per hash of the core's sources; the dependencies' virtualenv, one per
set of declarations and pins (unpacking pyspark's 400 MB again would cost ~9 CPU-s a run); and
the wheel's virtualenv, one per wheel and dependencies, beside the wheel.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

CORE = Path(__file__).resolve().parents[2] / "vault_core"
CACHE_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
DEPENDENCY_CACHE = CACHE_HOME / "message-vault" / "core-wheel"
UNUSED_FOR = 7 * 24 * 3600
"""A wheel or set of dependencies no run has used for this long is removed (its sources or
declarations changed)."""
NOT_SOURCES = ("build", "*.egg-info", "__pycache__")
"""What setuptools and Python leave beside the core's sources: not part of the wheel's input."""


def run(command: list[str], timeout: float, **kwargs: Any) -> str:
    """Run ``command`` in its own process group; on a timeout the whole group is killed."""
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{command[:4]} timed out after {timeout}s:\n{err[-3000:]}") from None
    assert proc.returncode == 0, f"{command[:4]} failed:\n{out[-2000:]}\n{err[-4000:]}"
    return out


def clean_env() -> dict[str, str]:
    """This process's environment without what would let a child see this checkout or venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def core_wheel(tmp_path: Path) -> Path:
    """The core's wheel, built from these sources, or the one built before from the same bytes.

    Kept by the hash of every source file's path and bytes (pyproject.toml and its build
    requirements among them), like the dependencies below: building it with pip in an isolated
    build environment costs ~6 CPU-s, and the same sources build the same wheel."""
    source = tmp_path / "src" / "vault_core"
    shutil.copytree(CORE, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))  # setuptools writes beside it
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(source).as_posix()}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    home = DEPENDENCY_CACHE / "wheels" / digest.hexdigest()[:16]
    built = list(home.glob("message_vault_core-*-py3-none-any.whl"))
    if not built:
        dist = tmp_path / "dist"
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)], 120)
        (wheel,) = dist.glob("message_vault_core-*-py3-none-any.whl")
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, home / f".{wheel.name}")
        (home / f".{wheel.name}").rename(home / wheel.name)  # whole or not at all, for a concurrent run
        built = [home / wheel.name]
    for other in home.parent.iterdir():  # the wheels of sources no run has built for a while
        if other != home and time.time() - other.stat().st_mtime > UNUSED_FOR:
            shutil.rmtree(other, ignore_errors=True)
    home.touch()
    return built[0]


def declared_by(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines, its extras' included: what pip installs for it."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        fields = Parser().parsestr(archive.read(name).decode())
    return sorted(fields.get_all("Requires-Dist") or [])


def dependencies_key(wheel: Path, pins: list[str]) -> str:
    """What the dependencies' virtualenv is kept by: the declarations, the pins, Python's version."""
    identity = [sys.version_info[:2], declared_by(wheel), sorted(pins)]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]


def dependencies_of(wheel: Path, env: dict[str, str], pins: list[str]) -> Path:
    """The site-packages of a virtualenv holding what ``wheel[spark]`` declares and nothing else,
    at the versions ``pins`` name (constraints: pip fails if the declarations refuse one).

    pip installs ``wheel[spark]`` into it once per set of declarations, pins and Python version
    (the key), then the wheel itself is uninstalled: what stays is exactly what its declarations
    bring. A lock makes concurrent runs build it once.
    """
    home = DEPENDENCY_CACHE / dependencies_key(wheel, pins)
    DEPENDENCY_CACHE.mkdir(parents=True, exist_ok=True)
    with (DEPENDENCY_CACHE / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        complete = home / "complete"
        if not complete.exists():
            shutil.rmtree(home, ignore_errors=True)
            run([sys.executable, "-m", "venv", "--without-pip", str(home)], 60)
            constraints = home / "constraints.txt"
            constraints.write_text("".join(f"{pin}\n" for pin in pins))
            # No pip of its own (bootstrapping one is ~3 CPU-s): this process's pip installs into it
            # through --python. --no-compile: byte-compiling pyspark's thousands of modules is a
            # third of the install; the Spark read compiles what it imports, once.
            pip = [sys.executable, "-m", "pip", "--python", str(home / "bin" / "python")]
            install = [*pip, "install", "-q", "--no-compile", "-c", str(constraints), f"{wheel}[spark]"]
            run(install, 300, env=env, cwd=wheel.parent)
            run([*pip, "uninstall", "-q", "-y", "message-vault-core"], 60, env=env)
            complete.touch()
        complete.touch()  # used now
        for other in DEPENDENCY_CACHE.iterdir():
            stamp = other / "complete"
            if other != home and stamp.exists() and time.time() - stamp.stat().st_mtime > UNUSED_FOR:
                shutil.rmtree(other, ignore_errors=True)
    (site,) = home.glob("lib/python*/site-packages")
    return site


def install_alone(tmp_path: Path, pins: list[str]) -> Path:
    """The Python of a virtualenv holding the core's wheel and what it declares (at ``pins``).

    Made once per wheel and set of dependencies, beside the wheel (pip's install of it is ~1.2
    CPU-s and 3 s): the same wheel installs the same files."""
    env = clean_env()
    wheel = core_wheel(tmp_path)
    dependencies = dependencies_of(wheel, env, pins)
    env_dir = wheel.parent / f"venv-{dependencies_key(wheel, pins)}"
    python = env_dir / "bin" / "python"
    with (DEPENDENCY_CACHE / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (env_dir / "complete").exists():
            shutil.rmtree(env_dir, ignore_errors=True)
            run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], 60)
            (site,) = env_dir.glob("lib/python*/site-packages")
            (site / "core-wheel-dependencies.pth").write_text(f"{dependencies}\n")
            pip = [sys.executable, "-m", "pip", "--python", str(python)]
            run([*pip, "install", "-q", "--no-deps", "--no-compile", str(wheel)], 120, env=env, cwd=tmp_path)
            (env_dir / "complete").touch()
    return python
