"""Every committed run folder under results/ opens as ``attn-zoo show`` opens it: its config
loads (running no code) and its trained model is built from its weights. The replay of their
figures is a benchmark (benchmarks/reevaluate.py); this checks, in CI, that nothing is
committed that cannot be."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from zoo.cli import main

RESULTS = Path(__file__).parents[1] / "results"


def _show(folder: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["show", str(folder)])
    return status, out.getvalue()


def test_every_committed_run_folder_opens_with_its_weights() -> None:
    folders = sorted(p.parent for p in RESULTS.rglob("config.yml"))
    assert len(folders) > 150
    failed, without_weights = {}, set()
    for folder in folders:
        name = folder.relative_to(RESULTS).as_posix()
        status, out = _show(folder)
        if status != 0:
            failed[name] = status
        elif "holds no trained model" in out:
            without_weights.add(name)
    assert not failed, f"attn-zoo show refused: {failed}"
    # the authors' weights stay out of git: `attn-zoo import --restore` writes them back
    # after checking provenance.json's hashes (tests/test_pretrained.py)
    imported = {n for n in without_weights if n.startswith("pretrained/")}
    assert all((RESULTS / n / "provenance.json").is_file() for n in imported)
    assert not without_weights - imported, f"committed without weights: {without_weights}"
