"""Where a run's wall time and CPU go: ``MV_TEST_TIMELINE=FILE ./dev test`` writes them to FILE.

Each process that runs tests (an xdist worker, or pytest itself with ``-n 0``) appends one JSON
line per test: the worker, the test, when it started and stopped, and the CPU the worker spent on
it (its own and its reaped children's), and once, after collecting, the CPU it used to start
and collect. The controller samples every process of the run once a
second (Azurite, the hosts and their language workers, the Spark JVM and its Python workers, the
pytest workers, ...) and appends what each kind has used so far, so the split of the run's CPU is
known by kind. What a process uses after its last sample is not seen (all of it, for one that
lives less than a second); the last line gives the CPU of the controller and of every process it
waited for (what a shell's ``time`` reports) beside the sampled total.

``python tests/helpers/timeline.py FILE`` prints each worker's busy and idle time and its CPU to
collect, the longest
path (the worker that ended last, and its longest tests) and the CPU by kind.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import psutil
import pytest

SETTING = "MV_TEST_TIMELINE"
SAMPLE_SECONDS = 1.0
UNNAMED = "other ()"
"""The kind of a process seen with no command line (in the middle of an exec, or a zombie):
named again at its next sample, since an exec of python by python keeps the process's name."""


def _append(path: Path, record: dict[str, Any]) -> None:
    # One short write per line in append mode: the workers' lines do not interleave.
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


the_runs_hosts: set[int] = set()
"""The pid of the run's host (tests/helpers/shared_servers.py): forked from the host template as
the tests' hosts are, it is told apart by its pid, and its language workers by their parent's."""


def kind_of(proc: psutil.Process, controller: int | None = None) -> str:
    """The role of one process of the run. The controller's own Azurite and host (and that
    host's workers), which serve every worker's tests, are told apart from those tests start."""
    kind = _role(proc)
    if controller is not None and kind == "azurite" and proc.ppid() == controller:
        return f"{kind} (the run's)"
    if controller is not None and kind in ("hosts", "host workers"):
        host = proc if kind == "hosts" else proc.parent()
        if host is not None and host.pid in the_runs_hosts:
            return f"{kind} (the run's)"
    return kind


def _is_host(cmd: str) -> bool:
    """A host's command line, or the host template's (tests/helpers/host_template.py), which the
    hosts the tests start are forked from and keep (the template's own CPU: their imports)."""
    return ("vault_local" in cmd and " host" in cmd) or "host_template.py" in cmd


def _is_template(proc: psutil.Process | None) -> bool:
    """The host template itself, whose forks (the hosts, its children) keep its command line:
    the one of them whose parent is no host."""
    up = proc.parent() if proc else None
    return (
        proc is not None
        and "host_template.py" in " ".join(proc.cmdline())
        and not (up and _is_host(" ".join(up.cmdline())))
    )


def _role(proc: psutil.Process) -> str:
    """From the command line (and the parent, for a host's language workers, which are forked
    from it and keep its command line)."""
    cmd = " ".join(proc.cmdline())
    if not cmd:
        return UNNAMED
    if "azurite" in cmd:
        return "azurite"
    if proc.name() == "java" or "/java " in cmd:
        return "spark jvm"
    if "pyspark" in cmd:  # a daemon and the workers it forks, by what they run
        return f"spark python: {proc.cmdline()[-1].rsplit('.', 1)[-1]}"
    if "vault_local.worker" in cmd:
        return "host workers"
    if _is_host(cmd):
        up = proc.parent()
        parent = " ".join(up.cmdline()) if up else ""  # a demo starts hosts too
        return "host workers" if _is_host(parent) and not _is_template(up) else "hosts"
    if "chrom" in cmd or "playwright" in cmd:
        return "browser"
    if "execnet" in cmd or "import sys;exec(eval(sys.stdin.readline()))" in cmd:
        return "pytest workers"
    if "vault_local" in cmd or "bench." in cmd:
        return "other vault processes"
    return f"other ({' '.join(proc.cmdline()[:3])[:60]})"


class Sampler:
    """The controller's side: a thread that samples every descendant's CPU once a second."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.used: dict[tuple[int, float, str], tuple[str, float]] = {}  # process -> (kind, CPU-s)
        self._stop = threading.Event()
        self._runs_hosts_known = 0
        self._thread = threading.Thread(target=self._run, name="timeline-sampler", daemon=True)
        self.begin = time.time()
        _append(path, {"begin": self.begin, "pid": os.getpid()})
        self._thread.start()

    def _sample(self) -> None:
        me = psutil.Process()
        learnt = len(the_runs_hosts) != self._runs_hosts_known
        self._runs_hosts_known = len(the_runs_hosts)
        for proc in me.children(recursive=True):
            try:
                with proc.oneshot():
                    # A process is named once (its command line read once) unless it runs
                    # another program (spark-submit's shell becomes the JVM); a pid used again
                    # by a later process is another key.
                    key = (proc.pid, proc.create_time(), proc.name())
                    known = self.used.get(key)
                    # Hosts named again once the run's host is known (it has started by then).
                    again = UNNAMED, *(("hosts", "host workers") if learnt else ())
                    kind = known[0] if known is not None and known[0] not in again else kind_of(proc, me.pid)
                    t = proc.cpu_times()
                    self.used[key] = (kind, t.user + t.system)
            except psutil.Error:
                pass
        own, _ = _cpu()
        self.used[(me.pid, 0.0, "")] = ("pytest controller (and this sampler)", own)

    def by_kind(self) -> dict[str, float]:
        kinds: dict[str, float] = defaultdict(float)
        for kind, seconds in self.used.values():
            kinds[kind] += seconds
        return {k: round(v, 1) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample()
            _append(self.path, {"t": round(time.time() - self.begin, 1), "cpu": self.by_kind()})

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        own, children = _cpu()
        _append(
            self.path,
            {
                "end": time.time(),
                "cpu": self.by_kind(),
                "sampled": round(sum(s for _, s in self.used.values()), 1),
                "controller_and_reaped": round(own + children, 1),
            },
        )


class Timeline:
    """The plugin: per-test lines on the processes that run tests, the sampler on the controller."""

    def __init__(self, path: Path, worker: str, controller: bool) -> None:
        self.path = path
        self.worker = worker
        self.sampler = Sampler(path) if controller else None
        self.final_teardown = (0.0, 0.0)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        start, (own, children) = time.time(), _cpu()
        yield
        stop, (own2, children2) = time.time(), _cpu()
        # The worker's last test also tears down the session's fixtures (the Spark session's JVM
        # is reaped there): their CPU is the run's, not that test's, and is reported apart.
        end_own, end_children = self.final_teardown
        cpu: dict[str, Any] = {
            "cpu": round(own2 - own - end_own, 3),
            "children": round(children2 - children - end_children, 3),
        }
        if self.final_teardown != (0.0, 0.0):
            cpu["final_teardown"] = [round(end_own, 3), round(end_children, 3)]
        _append(self.path, {"worker": self.worker, "test": item.nodeid, "start": start, "stop": stop, **cpu})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        own, children = _cpu()
        yield
        if nextitem is None:  # every fixture left, of every scope, ends here
            own2, children2 = _cpu()
            self.final_teardown = (own2 - own, children2 - children)

    def pytest_collection_finish(self) -> None:
        """What the process used to start and collect (a worker's share of the run's start)."""
        own, children = _cpu()
        _append(self.path, {"worker": self.worker, "collected": time.time(), "cpu": round(own + children, 3)})

    def pytest_unconfigure(self) -> None:
        if self.sampler:
            self.sampler.stop()


def register(config: pytest.Config) -> None:
    """Register the plugin when ``MV_TEST_TIMELINE`` names a file (the controller empties it).
    Under xdist the controller runs no test: its per-test hook never runs there."""
    setting = os.environ.get(SETTING)
    if not setting:
        return
    path = Path(setting).resolve()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        path.write_text("")
    worker = workerinput["workerid"] if workerinput else "main"
    config.pluginmanager.register(Timeline(path, worker, controller=workerinput is None), "mv-timeline")


# -- the report --------------------------------------------------------------------------------


def _lines(path: Path) -> Iterable[dict[str, Any]]:
    for line in path.read_text().splitlines():
        if line.strip():
            yield json.loads(line)


def report(path: Path, top: int = 12) -> str:
    records = list(_lines(path))
    begin = next(r["begin"] for r in records if "begin" in r)
    end_record = next((r for r in records if "end" in r), None)
    tests = [r for r in records if "test" in r]
    collected = {r["worker"]: r for r in records if "collected" in r}
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in tests:
        by_worker[r["worker"]].append(r)
    last_stop = max(r["stop"] for r in tests)
    out = [f"run: {last_stop - begin:.1f}s from the controller's start to the last test's end"]
    out.append(
        "worker   first  last   busy   idle-between  idle-at-end  tests  CPU(own+children)  CPU to collect"
    )
    for worker, rs in sorted(by_worker.items()):
        rs.sort(key=lambda r: r["start"])
        busy = sum(r["stop"] - r["start"] for r in rs)
        first, last = rs[0]["start"] - begin, rs[-1]["stop"] - begin
        cpu = sum(r["cpu"] + r["children"] + sum(r.get("final_teardown", ())) for r in rs)
        out.append(
            f"{worker:8} {first:5.1f} {last:6.1f} {busy:6.1f} {last - first - busy:13.1f}"
            f" {last_stop - begin - last:12.1f} {len(rs):6} {cpu:9.1f}"
            + (f" {collected[worker]['cpu']:14.1f}" if worker in collected else "")
        )
    critical = max(by_worker, key=lambda w: max(r["stop"] for r in by_worker[w]))
    out.append(f"\nthe last to end: {critical}; its modules (seconds) and longest tests:")
    modules: dict[str, float] = defaultdict(float)
    for r in by_worker[critical]:
        modules[r["test"].split("::")[0]] += r["stop"] - r["start"]
    for module, seconds in sorted(modules.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"  {seconds:6.1f}  {module}")
    for r in sorted(by_worker[critical], key=lambda r: r["start"] - r["stop"])[:top]:
        out.append(f"  {r['stop'] - r['start']:6.1f}  at {r['start'] - begin:5.1f}  {r['test']}")
    out.append("\nthe most CPU in a worker's own process (and its reaped children):")
    for r in sorted(tests, key=lambda r: -(r["cpu"] + r["children"]))[:top]:
        out.append(f"  {r['cpu']:6.1f} + {r['children']:5.1f}  {r['worker']}  {r['test']}")
    for r in tests:
        if "final_teardown" in r:
            own, children = r["final_teardown"]
            out.append(f"  {own:6.1f} + {children:5.1f}  {r['worker']}  (its end: the session's fixtures)")
    if end_record:
        out.append("\nCPU by kind of process (sampled each second, CPU-s):")
        out += [f"  {seconds:7.1f}  {kind}" for kind, seconds in end_record["cpu"].items()]
        out.append(
            f"  sampled {end_record['sampled']} CPU-s; the controller with every process it reaped:"
            f" {end_record['controller_and_reaped']} CPU-s"
        )
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
