"""Copy a Puzzle Pong student's run folder here with its weights stored in float16.

The student has 1.69M parameters: 6.7 MB in float32, over this repository's few-MB limit per
file; in float16 it is 3.4 MB (:func:`zoo.results.copy_half`). ``attn-zoo`` loads the
half-precision tensors into the float32 student, so the copy evaluates like any run folder,
and the figures quoted for it are measured on the copy itself::

    python results/puzzle_pong/half.py RUN results/puzzle_pong/0.0-d18/0-20261123-174000
    attn-zoo evaluate results/puzzle_pong/0.0-d18/0-20261123-174000 --episodes 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.results import copy_half


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished puzzle_pong_bc run folder")
    parser.add_argument("out", type=Path, help="the new folder (must not exist)")
    args = parser.parse_args(argv)
    try:
        print(copy_half(args.run, args.out))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
