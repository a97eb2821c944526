"""Parameter scale of E3 agents: the RMS of each parameter group, one row per run folder.

    python results/cartpole_pi/weights.py runs/pretrained/cartpole_pi \
        results/cartpole_pi/pi_x0 results/cartpole_pi/pi_warm_T300 results/cartpole_pi/pi_sigma1

writes ``weights.md`` beside this script. The authors' checkpoint is read from a run folder
made by ``attn-zoo import`` (see the README); it is not part of this repository. The
attention scores are ``(Q W_q)(h W_k)^T``, so their sharpness grows with the product of the
query and key projections' scales, and the head's scale sets the gain from the attention's
output to the action.
"""

from __future__ import annotations

import sys
from pathlib import Path

from zoo import runs
from zoo.trainers import get_trainer

HERE = Path(__file__).parent


def rms_by_group(folder: str) -> dict[str, float]:
    handle = runs.load(folder)
    policy = get_trainer("cmaes").load(handle.path, handle.config, "best")
    return {n: float(t.detach().pow(2).mean().sqrt()) for n, t in policy.named_parameters()}


def main(folders: list[str]) -> None:
    tables = {f: rms_by_group(f) for f in folders}
    names = list(next(iter(tables.values())))
    short = [n.removeprefix("neuron.") for n in names]
    lines = [
        "# RMS of each parameter group (best model of each run)",
        "",
        f"`python results/cartpole_pi/weights.py {' '.join(folders)}`",
        "",
        "| run | " + " | ".join(short) + " |",
        "| --- |" + " ---: |" * len(names),
    ]
    for folder, table in tables.items():
        lines.append(f"| `{folder}` | " + " | ".join(f"{table[n]:.2f}" for n in names) + " |")
        print(lines[-1])
    (HERE / "weights.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python results/cartpole_pi/weights.py RUN [RUN ...]")
    main(sys.argv[1:])
