"""BENCHMARKS.md is what ``./dev bench report`` writes, every benchmark runs as ``./dev bench NAME``,
and result files say which commit, date and machine their figures come from. Pure: no storage."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from bench import common, report

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PLATFORM_LINE = re.compile(r"^Python \d+\.\d+\.\d+\S*, \w+\.$", re.M)


BENCH_MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in ("__init__", "common", "report"))


def recorded_commands(module: str) -> list[str]:
    """The command of every ``report(name, "literal command", ...)`` call in bench/MODULE.py: read
    by the test, not at collection, where every xdist worker would parse every benchmark."""
    found = []
    for node in ast.walk(ast.parse((BENCH / f"{module}.py").read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "report"):
            continue
        if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            found.append(str(node.args[1].value))
    return found


def test_benchmarks_md_is_what_the_report_writes() -> None:
    """Only the interpreter line depends on who runs the report."""
    written = report.render(report.TEMPLATE.read_text())
    on_disk = (ROOT / "BENCHMARKS.md").read_text()
    assert PLATFORM_LINE.sub("PYTHON", written) == PLATFORM_LINE.sub("PYTHON", on_disk), (
        "BENCHMARKS.md is written by ./dev bench report: edit bench/BENCHMARKS.template.md and run it"
    )


def test_the_template_places_every_result_file() -> None:
    template = report.TEMPLATE.read_text()
    placed = set(re.findall(r"^\{\{\s*results:\s*(\w+)\s*\}\}$", template, re.M))
    assert placed == {p.stem for p in common.RESULTS.glob("*.json")}


@pytest.mark.parametrize("module", BENCH_MODULES)
def test_every_benchmark_records_its_dev_bench_command(module: str) -> None:
    commands = recorded_commands(module)
    assert [c for c in commands if not c.startswith(f"./dev bench {module}")] == []


@pytest.mark.parametrize("result", sorted(p.name for p in common.RESULTS.glob("*.json")))
def test_every_result_was_made_by_dev_bench(result: str) -> None:
    command = json.loads((common.RESULTS / result).read_text())["command"]
    assert command.startswith("./dev bench "), command


def test_results_record_commit_date_and_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    common.report("demo", "./dev bench demo", {"ratio (>= 0.7)": 0.75, "messages": 1000})
    doc = json.loads((tmp_path / "demo.json").read_text())
    recorded = doc["recorded"]
    assert re.fullmatch(r"[0-9a-f]{12}\+?", recorded["commit"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", recorded["date"])
    assert recorded["machine"]["cpus"] >= 1 and recorded["machine"]["cpu_model"]
    assert recorded["machine"]["python"].count(".") == 2
    # An old result file, written before the provenance was recorded.
    (tmp_path / "old.json").write_text(json.dumps({"command": "./dev bench old", "figures": {"x": 1}}))
    text = report.render("# B\n\n{{ results: demo }}\n\n{{ results: old }}\n")
    demo_block, old_block = report.results_block("demo"), report.results_block("old")
    assert f"Commit {recorded['commit'].rstrip('+')}" in demo_block and recorded["date"] in demo_block
    assert f"{recorded['machine']['cpus']} CPUs ({recorded['machine']['cpu_model']})" in demo_block
    assert "| ratio (>= 0.7) | 0.750 |" in demo_block and "| messages | 1,000 |" in demo_block
    assert old_block.rstrip().endswith("Commit, date and machine: not recorded.")
    assert demo_block in text and old_block in text and "{{" not in text
