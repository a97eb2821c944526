"""The documentation site: it builds with ``mkdocs build --strict`` (no broken link, no page
outside the nav), each experiment page's table is what ``attn-zoo report`` prints, the
summary tables quote those pages, and ``results/`` holds evidence, not scripts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.curve_windows import curves_match, window_table
from zoo.experiments import EXPERIMENTS
from zoo.report import probe_table, summary_table
from zoo.run_scores import collect
from zoo.trainers import MODULES
from zoo.trainers.keys import config_models, keys_page

ROOT = Path(__file__).parents[1]
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)
DECIMAL = re.compile(r"-?\d+\.\d+%?")


def _block(page: Path, name: str = "report") -> str:
    text = page.read_text()
    pattern = rf"^<!-- {name}: [^\n]*-->\n(.*?)^<!-- /{name} -->$"
    match = re.search(pattern, text, re.S | re.M)
    assert match, f"{page}: no '<!-- {name}: ... -->' ... '<!-- /{name} -->' block"
    return match.group(1).rstrip("\n")


def _page_text(page: Path) -> str:
    """A page with its ``--8<--`` snippets (the committed robustness tables) included."""
    text = page.read_text()
    return SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), text)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "experiments/e3_cartpole/index.html", "api/zoo/index.html"):
        assert (site / page).is_file(), page
    e3 = (site / "experiments/e3_cartpole/index.html").read_text()
    assert "405.8 ± 369.3" in e3  # the generated table and the included robustness tables
    assert "reshuffle every 25" in e3
    notes = (site / "lab_notes/e3_cartpole/index.html").read_text()
    assert "450.0 ± 385.7" in notes  # the route agent's tables, moved to its lab notes
    assert (site / "results/cartpole_pi/report/curves.png").is_file()  # figures join the site


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.key)
def test_page_table_is_what_report_prints(experiment) -> None:
    page = ROOT / experiment.page
    expected = summary_table(collect(experiment, ROOT / "results"), experiment)
    assert _block(page) == expected, f"run `attn-zoo report {experiment.key}` to refresh {page}"


@pytest.mark.parametrize("experiment", [e for e in EXPERIMENTS if e.probes], ids=lambda e: e.key)
def test_page_probe_table_is_what_report_prints(experiment) -> None:
    page = ROOT / experiment.page
    expected = probe_table(experiment, ROOT / "results")
    assert _block(page, "probes") == expected, f"run `attn-zoo report {experiment.key}`"


@pytest.mark.parametrize("index", ["README.md", "docs/experiments/index.md"])
def test_summary_tables_quote_the_experiment_pages(index: str) -> None:
    """Every decimal figure in the "ours" column of an E1-E8 summary table is on its page."""
    path = ROOT / index
    rows = [line for line in path.read_text().splitlines() if re.match(r"\| \[E\d\]\(", line)]
    assert len(rows) == 8, f"{index}: expected one row per experiment E1-E8"
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        link = re.match(r"\[E\d\]\(([^)]+)\)", cells[0]).group(1)
        page = _page_text((path.parent / link).resolve())
        ours = cells[-2]
        for number in DECIMAL.findall(ours):
            assert number in page, f"{index}: {cells[0]} quotes {number}, not on its page"


def test_benchmarks_ab_table_is_what_report_windows_writes(monkeypatch) -> None:
    """E8's learning-curve A/B on the benchmarks page is the committed windows.md, and that
    file is what ``attn-zoo report E8 ... --windows 500000`` makes of the committed runs."""
    monkeypatch.chdir(ROOT)  # the rows are labelled with the folders as given
    folders = [f"results/atari_nonlocal/{f}" for f in ("Pong-fc", "fast_rows/Pong-fc")]
    folders.append("results/atari_nonlocal/fast_rows_graph/Pong-fc")
    experiment = next(e for e in EXPERIMENTS if e.key == "E8")
    cells = collect(experiment, folders=folders)
    table, _ = window_table(cells, 500_000)
    written = Path("results/atari_nonlocal/fast_rows/report/windows.md")
    assert written.read_text() == table + "\n", f"refresh {written}: docs/benchmarks.md names how"
    assert f'--8<-- "{written.as_posix()}"' in (ROOT / "docs/benchmarks.md").read_text()
    # the verdict in atari.json is the rule applied to those runs
    recorded = json.loads(Path("benchmarks/results/atari.json").read_text())["learning_curves"]
    assert recorded == curves_match(cells[0], cells[2], 500_000), (
        "python benchmarks/atari.py --ab-only"
    )


def test_the_trainer_keys_page_is_what_the_trainers_config_models_give() -> None:
    page = ROOT / "docs/trainer_keys.md"
    refresh = """python -c "import zoo.trainers.keys as k; print(k.keys_page(), end='')" > """
    assert page.read_text() == keys_page(), f"refresh it: {refresh}{page.relative_to(ROOT)}"
    titled = {algo for title in config_models() for algo in title[6:].split(", ")}
    assert titled == set(MODULES)


def test_no_scripts_under_results() -> None:
    scripts = sorted(
        str(p.relative_to(ROOT)) for ext in ("*.py", "*.sh") for p in (ROOT / "results").rglob(ext)
    )
    assert not scripts, f"analyses belong in zoo/, tested: {scripts}"
