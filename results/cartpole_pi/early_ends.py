"""E3, issue 12: which test episodes an agent loses that a reference agent does not, and what
the difference costs.

``python results/cartpole_pi/early_ends.py REFERENCE AGENT [AGENT ...]`` plays each agent on
the 1000 test episodes of ``balance.py`` (the seeds of ``attn-zoo evaluate``; a
``trials_<name>.npy`` file stands for a trial's agent) and writes ``early_ends.md`` beside this
script (``--out=FILE``: there instead):

- the gap of mean returns, split over four disjoint sets of episodes: ended early for the
  agent only, for the reference only, for both, for neither (each set's share of the summed
  return differences, so the four add up to the gap);
- the share of episodes that end early, by the cart's start speed towards the centre of the
  track (``-sign(x) x'``: positive when the cart starts moving inwards);
- on the starts moving inwards at 5 m/s or more, how hard each agent brakes: its mean action
  against the start velocity (``-sign(x') a``; 1 is full force against the motion) over the
  first steps.

The reference is meant to be the authors' checkpoint, made by ``attn-zoo import`` (see the
README); it is not part of this repository.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import torch
from balance import EPISODES, STEPS, load_agent, rollouts

HERE = Path(__file__).parent
BINS = [-10, -5, -2, 2, 5, 10]  # start speed towards the centre, m/s
FAST = 5.0  # m/s towards the centre: the starts of the braking table
SPANS = [(0, 10), (10, 30), (30, 60), (60, 120)]  # steps of the braking table


def braking(r: dict[str, np.ndarray], fast: np.ndarray) -> list[str]:
    against = -np.sign(r["starts"][fast, 1])[None] * r["actions"][:, fast]
    return [f"{against[a:b].mean():.2f}" for a, b in SPANS]


def early_share(early: np.ndarray, inward: np.ndarray) -> list[str]:
    cells = []
    for lo, hi in itertools.pairwise(BINS):
        m = (inward >= lo) & (inward < hi)
        cells.append(f"{early[m].mean():.0%} of {m.sum()}")
    return cells


def main(reference: str, agents: list[str], out: str | None) -> None:
    torch.set_num_threads(1)
    ref = rollouts(*load_agent(reference), action_steps=SPANS[-1][1])
    x, x_dot = ref["starts"][:, 0], ref["starts"][:, 1]
    inward = -np.sign(x) * x_dot
    ref_early = ref["length"] < STEPS
    fast = inward >= FAST
    flag = f"--out={out} " if out else ""
    lines = [
        f"# Early ends against a reference ({EPISODES} test episodes of CartPoleSwingUpHarder)",
        "",
        f"`python results/cartpole_pi/early_ends.py {flag}{reference} {' '.join(agents)}`",
        "",
        f"Reference `{reference}`: mean {ref['returns'].mean():.1f}, "
        f"{ref_early.mean():.1%} of episodes end early.",
        "",
        "Gap = reference mean - agent mean, split over the episodes that end early for the "
        "agent only, for the reference only, for both and for neither (count, then the set's "
        "part of the gap).",
        "",
        "| agent | mean | gap | agent only early | reference only early | both early "
        "| neither: part (their mean, ref's) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    speeds = []
    brakes = [f"| reference `{reference}` | " + " | ".join(braking(ref, fast)) + " |"]
    for agent in agents:
        r = rollouts(*load_agent(agent), action_steps=SPANS[-1][1])
        early = r["length"] < STEPS
        diff = ref["returns"] - r["returns"]
        sets = {
            "agent": early & ~ref_early,
            "ref": ref_early & ~early,
            "both": early & ref_early,
            "neither": ~early & ~ref_early,
        }
        part = {k: diff[m].sum() / EPISODES for k, m in sets.items()}
        neither = sets["neither"]
        lines.append(
            f"| `{agent}` | {r['returns'].mean():.1f} | {diff.mean():.1f} "
            f"| {sets['agent'].sum()}: {part['agent']:+.1f} "
            f"| {sets['ref'].sum()}: {part['ref']:+.1f} "
            f"| {sets['both'].sum()}: {part['both']:+.1f} "
            f"| {neither.sum()}: {part['neither']:+.1f} ({r['returns'][neither].mean():.1f}, "
            f"{ref['returns'][neither].mean():.1f}) |"
        )
        speeds.append(f"| `{agent}` | " + " | ".join(early_share(early, inward)) + " |")
        brakes.append(f"| `{agent}` | " + " | ".join(braking(r, fast)) + " |")
        print(lines[-1], flush=True)
    header = " | ".join(f"[{lo}, {hi})" for lo, hi in itertools.pairwise(BINS))
    lines += [
        "",
        "Episodes ending early, by the start speed towards the centre (m/s):",
        "",
        f"| agent | {header} |",
        "| --- |" + " ---: |" * (len(BINS) - 1),
        f"| reference `{reference}` | " + " | ".join(early_share(ref_early, inward)) + " |",
        *speeds,
        "",
        f"Braking on the {fast.sum()} starts moving towards the centre at {FAST:g} m/s or more: "
        "mean action against the start velocity (1: full force against the motion), by steps:",
        "",
        "| agent | " + " | ".join(f"{a}-{b - 1}" for a, b in SPANS) + " |",
        "| --- |" + " ---: |" * len(SPANS),
        *brakes,
    ]
    (Path(out) if out else HERE / "early_ends.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    out = next((a.split("=", 1)[1] for a in args if a.startswith("--out=")), None)
    names = [a for a in args if not a.startswith("--")]
    if len(names) < 2 or any(a.startswith("--") and not a.startswith("--out=") for a in args):
        sys.exit("usage: python results/cartpole_pi/early_ends.py [--out=FILE] REFERENCE AGENT ...")
    main(names[0], names[1:], out)
