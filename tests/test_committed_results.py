"""Every committed run folder under results/ opens: its config loads (running no code) and the
weights its trainer reads are there. The replay of their figures is a benchmark
(benchmarks/reevaluate.py); this checks, in CI, that nothing is committed that cannot be."""

from __future__ import annotations

from pathlib import Path

from zoo.runs import load
from zoo.trainers import get_trainer
from zoo.trainers.contract import EpisodeTrainer

RESULTS = Path(__file__).parents[1] / "results"


def _weights(folder: Path) -> Path:
    """The file the folder's trainer reads its trained model from."""
    trainer = get_trainer(load(folder).config.algo)
    if isinstance(trainer, EpisodeTrainer):
        found = trainer.model_file(folder, "best")
        return found[0] if isinstance(found, tuple) else found
    return folder / "model.pt"  # a classifier (E1)


def test_every_committed_run_folder_loads_and_holds_its_weights() -> None:
    folders = sorted(p.parent for p in RESULTS.rglob("config.yml"))
    assert len(folders) > 150
    missing = set()
    for folder in folders:
        name = folder.relative_to(RESULTS).as_posix()
        if name.startswith("pretrained/"):
            # the authors' weights stay out of git: `attn-zoo import --restore` writes them
            # back after checking provenance.json's hashes (tests/test_pretrained.py)
            assert (folder / "provenance.json").is_file(), name
            continue
        try:
            if not _weights(folder).is_file():
                missing.add(name)
        except FileNotFoundError:
            missing.add(name)
    assert not missing, f"committed without weights: {sorted(missing)}"
