"""How many different screens a Puzzle Pong student's data holds (issue 13).

``python results/puzzle_pong/diversity.py RUN [RUN ...] [--out FILE]`` reads the data files
of each BC run folder (``RUN/data/part-*.npz``, the teacher's steps, then
``dagger-*.npz``, the rounds') and counts, file by file and in total, the samples, the
distinct samples (equal 196 x 144 tokens) and the distinct screens (frames, as
:class:`~attn_policies.algorithms.frame_store.FrameStore` holds them). The counts are
cumulative: a file's "new" screens are those no earlier file of the run had. The table is
printed, and written as Markdown to ``--out`` when given.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from attn_policies.algorithms.bc import BCDataset
from attn_policies.algorithms.frame_store import FrameStore


def run_rows(folder: Path) -> list[str]:
    files = sorted((folder / "data").glob("part-*.npz"))
    files += sorted((folder / "data").glob("dagger-*.npz"))
    if not files:
        raise SystemExit(f"{folder}: no data files under {folder / 'data'}")
    sizes = []
    for file in files:  # only the labels: one file's screens in memory at a time
        with np.load(file, allow_pickle=False) as npz:
            sizes.append(len(npz["actions"]))
    store = FrameStore(sum(sizes), stack=4)
    rows, total, distinct = [], 0, 0
    for file in files:
        tokens = BCDataset.load(file).obs["observation"]
        frames, samples = store.n_frames, distinct
        store.append(tokens)
        # each distinct frame has one row, so equal samples are equal rows of frame indices
        distinct = len(np.unique(store.data().index, axis=0))
        total += len(tokens)
        rows.append(
            f"| `{folder}` | {file.name} | {len(tokens):,} | {distinct - samples:,} | "
            f"{store.n_frames - frames:,} | {total:,} | {distinct:,} | {store.n_frames:,} |"
        )
    return rows


def main(args: list[str]) -> None:
    out = None
    if "--out" in args:
        i = args.index("--out")
        out, args = Path(args[i + 1]), args[:i] + args[i + 2 :]
    if not args:
        raise SystemExit("usage: diversity.py RUN [RUN ...] [--out FILE]")
    lines = [
        "| run | file | samples | new distinct samples | new screens | samples so far | "
        "distinct samples so far | screens so far |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for folder in args:
        lines += run_rows(Path(folder))
    text = "\n".join(lines) + "\n"
    print(text)
    if out is not None:
        header = f"`python results/puzzle_pong/diversity.py {' '.join(args)}`\n\n"
        out.write_text(header + text)


if __name__ == "__main__":
    main(sys.argv[1:])
