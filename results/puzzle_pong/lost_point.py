"""Where a Puzzle Pong student loses its first point: its moves beside its teacher's.

    python results/puzzle_pong/lost_point.py results/puzzle_pong/0.0-stoch/0-20261124-043300 \
        --noops 1 --out results/puzzle_pong/0.0-stoch/lost_point_1.json

The student plays one greedy game from a fixed start (``--noops`` frames at reset; its game
depends only on the count mod 4, see ``noops.py``) while the teacher, reading the RAM
features of the same emulator, labels every step. Pong's six actions move the paddle three
ways (NOOP and FIRE stay, RIGHT and RIGHTFIRE go up, LEFT and LEFTFIRE go down), so the
agreement is given on actions and on moves, and the steps before the first lost point show
the teacher's probability of each move beside the student's move.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

import zoo
from attn_policies.algorithms.bc import as_teacher
from zoo import factory
from zoo.trainers import get_trainer
from zoo.trainers.bc_trainer import _collect_run, _student_view, load_teacher

MOVE = np.array([0, 0, 1, 2, 1, 2])  # Pong's action -> stay, up, down
MOVES = ("stay", "up", "down")


def move_counts(moves: np.ndarray) -> dict[str, int]:
    return dict(zip(MOVES, np.bincount(moves, minlength=3).tolist(), strict=True))


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--noops", type=int, default=1, help="no-op frames at reset")
    parser.add_argument("--which", default="best", choices=["best", "last"])
    parser.add_argument("--before", type=int, default=12, help="steps shown before the point")
    parser.add_argument("--max-steps", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=2_000_000, help="the test seed (shuffles)")
    parser.add_argument(
        "--player", default="student", choices=["student", "teacher"],
        help="who plays the game (teacher: its own greedy moves, for its move shares)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    handle = zoo.load(args.run)
    run = handle.config
    teacher, view = load_teacher(run, handle.path)
    act = as_teacher(teacher)
    agent = get_trainer("bc").load(handle.path, run, args.which)
    collect = _collect_run(run)  # the student's tokens and the teacher's RAM features
    env_kwargs = {**collect.body["env_kwargs"], "noops": args.noops}
    collect = dataclasses.replace(collect, body={**collect.body, "env_kwargs": env_kwargs})
    env = factory.make_vec_env(collect, n_envs=1, training=False)
    student_view = _student_view(run, env.observation_space)
    env.seed(args.seed)
    obs, start = env.reset(), np.ones(1, bool)
    student, labels, probs, points = [], [], [], []
    for t in range(args.max_steps):
        label, logits = act(view(obs))
        action, _ = agent.predict(student_view(obs), episode_start=start, deterministic=True)
        student.append(int(action[0]))
        labels.append(int(label[0]))
        probs.append(softmax(np.asarray(logits[0], np.float64)))
        if args.player == "teacher":
            action = np.asarray(label)
        obs, reward, start, _ = env.step(action)
        if reward[0]:
            points.append((t, float(reward[0])))
        if start[0]:
            break
    env.close()
    student_moves, teacher_moves = MOVE[np.array(student)], MOVE[np.array(labels)]
    p = np.array(probs)
    p_move = np.stack([p[:, m == MOVE].sum(axis=1) for m in range(3)], axis=1)
    summary: dict = {
        "run": args.run, "which": args.which, "noops": args.noops, "steps": len(student),
        "return": sum(r for _, r in points),
        "agreement_actions": float(np.mean(np.array(student) == np.array(labels))),
        "agreement_moves": float(np.mean(student_moves == teacher_moves)),
        "teacher_p_of_student_move": float(p_move[np.arange(len(student)), student_moves].mean()),
        "player": args.player,
        "student_moves": move_counts(student_moves),
        "teacher_moves": move_counts(teacher_moves),
        "points": points,
    }  # fmt: skip
    print(f"{args.run} ({args.which}), {args.noops} no-ops: return {summary['return']:+.0f} "
          f"in {len(student)} steps; the student plays the teacher's action on "
          f"{summary['agreement_actions']:.1%} of its steps, its move on "
          f"{summary['agreement_moves']:.1%}")  # fmt: skip
    lost = [t for t, r in points if r < 0]
    if lost:
        end = lost[0]
        previous = max((t for t, _ in points if t < end), default=-1)
        steps = range(max(previous + 1, end - args.before + 1), end + 1)
        confident = [t for t in steps if p_move[t].max() >= 0.9]
        wrong = [t for t in confident if student_moves[t] != p_move[t].argmax()]
        summary["first_lost_point"] = {
            "step": end,
            "steps": [{"t": t, "student": MOVES[student_moves[t]],
                       "teacher_p": dict(zip(MOVES, np.round(p_move[t], 3).tolist(), strict=True))}
                      for t in steps],
            "teacher_sure": len(confident), "student_against_a_sure_teacher": len(wrong),
        }  # fmt: skip
        print(f"first lost point at step {end}; in the {len(steps)} steps before it the teacher "
              f"is sure (p >= 0.9) of its move on {len(confident)}, and the student moves "
              f"otherwise on {len(wrong)} of those")  # fmt: skip
        for row in summary["first_lost_point"]["steps"]:
            shown = "  ".join(f"{k} {v:.2f}" for k, v in row["teacher_p"].items())
            print(f"  step {row['t']:5d}: student {row['student']:>4}  teacher {shown}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
