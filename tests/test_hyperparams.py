"""The rl-baselines3-zoo hyper-parameter files in zoo/hyperparams, run by rl-zoo3 itself.

Each command is the README's, verbatim, with a short ``-n``; the trained models must be
ours (the relational Q-network, the AWRL extractor), not rl-zoo3 defaults.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from stable_baselines3 import A2C, DQN, PPO

import zoo

HYPERPARAMS = Path(zoo.__file__).parent / "hyperparams"


def rl_zoo3_train(tmp_path: Path, algo: str, env: str, steps: int) -> Path:
    """``python -m rl_zoo3.train ... -conf zoo/hyperparams/<algo>.yml``; the saved model."""
    cmd = [sys.executable, "-m", "rl_zoo3.train", "--algo", algo, "--env", env,
           "--gym-packages", "attn_envs", "-conf", str(HYPERPARAMS / f"{algo}.yml"),
           "-n", str(steps), "-f", str(tmp_path), "--eval-freq", "-1", "--seed", "0"]  # fmt: skip
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1"}
    tmp_path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env_vars
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (model,) = (tmp_path / algo).glob(f"*_1/{env.replace('/', '-')}.zip")
    return model


# One short `-optimize` trial per file, as docs/rl_zoo3.md runs it: rl-zoo3's random sampler
# (seeded; PPO's seed 2 draws a 32-step rollout, seed 0 a 1024-step one), no pruner, one
# evaluation of one episode, one env. rl-zoo3 builds the evaluation env without the file's
# env_kwargs, so they are given again with --eval-env-kwargs.
OPTIMIZE = {
    "a2c": ("ALE/Pong-v5", "NonLocalNatureCNN",
            ["frameskip:1", "repeat_action_probability:0.0", "full_action_space:False"]),
    "dqn": ("attn_envs/EgocentricDoorKey-5x5-v0", "RelationalExtractor", []),
    "ppo": ("attn_envs/DistractorPong-v0", "AWRLExtractor",
            ["n_distractors:0", "frameskip:4", "repeat_action_probability:0.0", "order_seed:0"]),
}  # fmt: skip


def rl_zoo3_optimize(tmp_path: Path, algo: str) -> tuple[subprocess.CompletedProcess, Path]:
    """One ``-optimize`` trial of ``zoo/hyperparams/<algo>.yml``; the trial's saved model."""
    env, _, eval_kwargs = OPTIMIZE[algo]
    cmd = [sys.executable, "-m", "rl_zoo3.train", "--algo", algo, "--env", env,
           "--gym-packages", "attn_envs", "-conf", str(HYPERPARAMS / f"{algo}.yml"),
           "-optimize", "--n-trials", "1", "--n-jobs", "1", "--sampler", "random",
           "--pruner", "none", "--n-evaluations", "1", "--eval-episodes", "1", "-n", "64",
           "-params", "n_envs:1", "-f", "logs", "--optimization-log-path", "logs/trials",
           "--seed", "2" if algo == "ppo" else "0", "--no-optim-plots"]  # fmt: skip
    if eval_kwargs:
        cmd += ["--eval-env-kwargs", *eval_kwargs]
    tmp_path.mkdir(parents=True, exist_ok=True)
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env_vars
    )
    return done, tmp_path / "logs" / "trials" / "trial_0" / "best_model.zip"


@pytest.mark.parametrize("algo", sorted(OPTIMIZE))
def test_optimize_keeps_the_attention_extractor(tmp_path: Path, algo: str) -> None:
    # rl-zoo3's samplers replace policy_kwargs; the policy classes carry our extractors, so
    # the trial trains them (not FlattenExtractor / NatureCNN), and the report is written.
    done, model_file = rl_zoo3_optimize(tmp_path, algo)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Number of finished trials:  1" in done.stdout and "pruned" not in done.stderr
    (report,) = (tmp_path / "logs" / algo).glob("report_*.csv")  # pandas writes it
    assert report.stat().st_size > 0
    model = {"a2c": A2C, "dqn": DQN, "ppo": PPO}[algo].load(model_file, device="cpu")
    policy = model.policy.q_net if algo == "dqn" else model.policy
    extractor = policy.features_extractor
    assert type(extractor).__name__ == OPTIMIZE[algo][1]


def test_every_file_names_registered_envs_and_rl_zoo3_keys() -> None:
    import ale_py
    import gymnasium as gym

    import attn_envs  # noqa: F401

    gym.register_envs(ale_py)

    files = sorted(HYPERPARAMS.glob("*.yml"))
    assert [f.stem for f in files] == ["a2c", "dqn", "ppo"]
    for file in files:
        for env_id, params in yaml.safe_load(file.read_text()).items():
            gym.spec(env_id)  # raises for an unknown id
            assert {"n_timesteps", "policy"} <= set(params), (file.name, env_id)


def test_rl_zoo3_trains_doorkey_and_distractor_pong_verbatim(tmp_path: Path) -> None:
    doorkey = "attn_envs/EgocentricDoorKey-5x5-v0"
    dqn = DQN.load(rl_zoo3_train(tmp_path / "dqn", "dqn", doorkey, 120))
    assert type(dqn.policy).__name__ == "RelationalDQNPolicy"
    assert dqn.replay_buffer_class.__name__ == "OversamplingReplayBuffer"
    assert dqn.num_timesteps == 120
    ppo = PPO.load(rl_zoo3_train(tmp_path / "ppo", "ppo", "attn_envs/DistractorPong-v0", 1024))
    assert type(ppo.policy.features_extractor).__name__ == "AWRLExtractor"
    assert ppo.n_envs == 8 and ppo.n_steps == 128 and ppo.num_timesteps == 1024
