"""Tests for zoo.evaluation: seeded episode counting, policy modes, success, keep-best."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import A2C
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.vec_env import DummyVecEnv

import zoo.evaluation
from zoo.config import EvalConfig
from zoo.evaluation import KeepBestCallback, evaluate_modes, evaluate_policy, select_score


class ChoiceEnv(gym.Env):
    """Action 1 ends the episode (terminated); action 0 goes on until step ``limit``
    (truncated). Rewards are 0, 1 or 2, drawn from the env's seeded generator.
    ``info["is_success"]`` is set on termination at an even step only, so it differs from
    "terminated" whenever the agent stops at an odd step."""

    observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, limit: int = 5) -> None:
        self.limit = limit
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        reward = float(self.np_random.integers(0, 3))
        terminated = int(action) == 1
        truncated = not terminated and self.t >= self.limit
        info = {"is_success": terminated and self.t % 2 == 0} if terminated or truncated else {}
        obs = np.full(1, self.t / self.limit, np.float32)
        return obs, reward, terminated, truncated, info


def vec_env(limits: list[int]) -> DummyVecEnv:
    return DummyVecEnv([lambda n=n: Monitor(ChoiceEnv(n)) for n in limits])


class ConstantModel:
    """``predict`` answers ``action`` (deterministic) or ``stochastic_action``; records calls."""

    def __init__(self, action: int = 0, stochastic_action: int | None = None) -> None:
        self.action = action
        self.stochastic_action = action if stochastic_action is None else stochastic_action
        self.deterministic_flags: set[bool] = set()

    def predict(
        self,
        obs: np.ndarray,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, None]:
        self.deterministic_flags.add(deterministic)
        action = self.action if deterministic else self.stochastic_action
        return np.full(len(obs), action), None


# --- evaluate_policy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_episodes", "expected"),
    [(7, {2: 2, 3: 2, 4: 3}), (2, {3: 1, 4: 1}), (3, {2: 1, 3: 1, 4: 1}), (1, {4: 1})],
)
def test_counts_exactly_n_episodes_split_across_envs(
    n_episodes: int, expected: dict[int, int]
) -> None:
    # Env i truncates after i + 2 steps, so an episode's length tells which env ran it; the
    # short envs finish more episodes than they are allotted, and those must not count.
    env = vec_env([2, 3, 4])
    result = evaluate_policy(ConstantModel(0), env, n_episodes, seed=0)  # type: ignore[arg-type]
    env.close()
    assert result["n_episodes"] == n_episodes
    assert len(result["rewards"]) == len(result["lengths"]) == n_episodes
    assert Counter(result["lengths"]) == expected
    assert result["mean_length"] == pytest.approx(np.mean(result["lengths"]))
    assert result["std_length"] == pytest.approx(np.std(result["lengths"]))
    assert result["mean_reward"] == pytest.approx(np.mean(result["rewards"]))
    assert result["std_reward"] == pytest.approx(np.std(result["rewards"]))
    assert result["success_rate"] is None


def test_same_seed_same_results_and_other_seed_differs() -> None:
    env = vec_env([6, 6])
    model = ConstantModel(0)
    runs = [evaluate_policy(model, env, 10, mode=0.5, seed=s) for s in (3, 3, 4)]  # type: ignore[arg-type]
    env.close()
    assert runs[0] == runs[1]
    assert runs[0]["rewards"] != runs[2]["rewards"]


def test_same_seed_same_results_on_a_fresh_env() -> None:
    results = []
    for _ in range(2):
        env = vec_env([6, 6])
        results.append(evaluate_policy(ConstantModel(0), env, 6, mode=0.3, seed=9))  # type: ignore[arg-type]
        env.close()
    assert results[0] == results[1]


def test_global_numpy_random_state_is_untouched() -> None:
    env = vec_env([6])
    np.random.seed(123)  # noqa: NPY002  (the legacy global state is what must stay put)
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    evaluate_policy(ConstantModel(0), env, 5, mode=0.5, seed=0)  # type: ignore[arg-type]
    env.close()
    np.testing.assert_array_equal(np.random.get_state()[1], before)  # noqa: NPY002


def test_epsilon_one_acts_at_random() -> None:
    env = vec_env([10])
    model = ConstantModel(0)
    greedy = evaluate_policy(model, env, 40, "deterministic", seed=0, success="terminated")  # type: ignore[arg-type]
    random = evaluate_policy(model, env, 40, 1.0, seed=0, success="terminated")  # type: ignore[arg-type]
    zero = evaluate_policy(model, env, 40, 0.0, seed=0, success="terminated")  # type: ignore[arg-type]
    env.close()
    assert (greedy["mean_length"], greedy["success_rate"]) == (10.0, 0.0)
    # Uniform actions stop with probability 1/2 per step: mean length ~2, nearly all stop.
    assert 1.3 < random["mean_length"] < 3.0
    assert random["success_rate"] > 0.9
    assert set(random["lengths"]) != {10}
    assert {k: v for k, v in zero.items() if k != "mode"} == {
        k: v for k, v in greedy.items() if k != "mode"
    }
    assert model.deterministic_flags == {True}  # epsilon-greedy is around the greedy action


def test_stochastic_mode_samples_from_the_policy() -> None:
    env = vec_env([5])
    model = ConstantModel(action=0, stochastic_action=1)
    result = evaluate_policy(model, env, 4, "stochastic", seed=0, success="terminated")  # type: ignore[arg-type]
    env.close()
    assert model.deterministic_flags == {False}
    assert (result["mean_length"], result["success_rate"]) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("action", "limit", "success", "rate"),
    [
        (1, 5, "terminated", 1.0),  # stops at step 1: terminated
        (0, 5, "terminated", 0.0),  # runs into the time limit: truncated
        (1, 5, "is_success", 0.0),  # terminated at an odd step: the env says no
        (0, 5, "is_success", 0.0),
        (1, 5, None, None),
    ],
)
def test_success_terminated_vs_truncated_vs_flag(
    action: int, limit: int, success: str | None, rate: float | None
) -> None:
    env = vec_env([limit, limit])
    result = evaluate_policy(ConstantModel(action), env, 4, seed=0, success=success)  # type: ignore[arg-type]
    env.close()
    assert result["success_rate"] == rate


def test_is_success_flag_is_read() -> None:
    class StopAtTwo(ConstantModel):
        def predict(self, obs: np.ndarray, *args: Any, **kwargs: Any) -> tuple[np.ndarray, None]:
            # obs is t / limit: stop at the second step (t = 1 when deciding).
            return (obs[:, 0] > 0).astype(int), None

    env = vec_env([5])
    flag = evaluate_policy(StopAtTwo(), env, 3, seed=0, success="is_success")  # type: ignore[arg-type]
    env.close()
    assert flag["lengths"] == [2, 2, 2]
    assert flag["success_rate"] == 1.0


def test_evaluate_modes_and_select_score() -> None:
    env = vec_env([5])
    cfg = EvalConfig(policies={"greedy": "deterministic", "eps": 1.0}, success="terminated")
    results = evaluate_modes(ConstantModel(0), env, cfg, 6, seed=0)  # type: ignore[arg-type]
    env.close()
    assert list(results) == ["greedy", "eps"]
    assert results["greedy"]["mode"] == "deterministic" and results["eps"]["mode"] == 1.0
    assert select_score(results, "greedy/success_rate") == 0.0
    # Shorter episodes score higher.
    assert select_score(results, "greedy/mean_length") == -5.0
    assert select_score(results, "eps/mean_length") > select_score(results, "greedy/mean_length")


def test_final_policies_run_only_in_the_final_test() -> None:
    env = vec_env([5])
    cfg = EvalConfig(policies={"greedy": "deterministic"}, final_policies={"eps": 1.0})
    during = evaluate_modes(ConstantModel(0), env, cfg, 4, seed=0)  # type: ignore[arg-type]
    final = evaluate_modes(ConstantModel(0), env, cfg, 4, seed=0, final=True)  # type: ignore[arg-type]
    env.close()
    assert list(during) == ["greedy"] and list(final) == ["greedy", "eps"]
    with pytest.raises(ValueError, match=r"final_policies\.eps"):
        EvalConfig(final_policies={"eps": 2.0})


# --- KeepBestCallback -------------------------------------------------------------------------


def tiny_model(n_envs: int = 1, n_steps: int = 5) -> A2C:
    model = A2C("MlpPolicy", vec_env([5] * n_envs), n_steps=n_steps, seed=0)
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def scripted(monkeypatch: pytest.MonkeyPatch, values: list[float], metric: str) -> None:
    """Make each evaluation report the next of ``values`` as ``g/<metric>``."""
    queue = list(values)

    def fake(model: Any, env: Any, cfg: EvalConfig, n: int, seed: int) -> dict[str, Any]:
        record = {
            "mode": "deterministic",
            "mean_reward": 0.0,
            "std_reward": 0.0,
            "mean_length": 1.0,
            "std_length": 0.0,
            "success_rate": None,
            "n_episodes": n,
            "rewards": [0.0],
            "lengths": [1],
        }
        record[metric] = queue.pop(0)
        return {"g": record}

    monkeypatch.setattr(zoo.evaluation, "evaluate_modes", fake)


def saved_steps(path: Path) -> int:
    data, _, _ = load_from_zip_file(path)
    return int(data["num_timesteps"])


@pytest.mark.parametrize(
    ("metric", "values", "best"),
    [
        ("mean_reward", [1.0, 0.0, 1.0, 2.0, 1.5], [True, False, True, True, False]),
        ("mean_length", [10.0, 5.0, 7.0, 5.0, 9.0], [True, True, False, True, False]),
    ],
)
def test_keep_best_saves_only_on_improvement_ties_to_later(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    metric: str,
    values: list[float],
    best: list[bool],
) -> None:
    scripted(monkeypatch, values, metric)
    model = tiny_model()
    cfg = EvalConfig(freq=10, policies={"g": "deterministic"}, select=f"g/{metric}")
    callback = KeepBestCallback(vec_env([5]), cfg, tmp_path)
    callback.init_callback(model)
    last_best = None
    for k, is_best in enumerate(best, start=1):
        model.num_timesteps = callback.num_timesteps = 10 * k
        callback.evaluate()
        last_best = 10 * k if is_best else last_best
        assert saved_steps(tmp_path / "best_model.zip") == last_best
    history = json.loads((tmp_path / "evaluations.json").read_text())
    assert [h["step"] for h in history] == [10, 20, 30, 40, 50]
    assert [bool(h.get("best")) for h in history] == best
    sign = -1 if metric == "mean_length" else 1
    assert [h["score"] for h in history] == [sign * v for v in values]
    assert history[0]["g"][metric] == values[0]
    assert "rewards" not in history[0]["g"]  # per-episode lists stay out of the history


def test_keep_best_checks_play_the_check_seeds_never_the_test_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keep-best callback evaluates on eval.seed's episodes; the test's seeds are apart
    (a callback that played eval.test_seed, or a default test_seed equal to the check seed,
    fails here)."""
    seeds: list[int] = []
    scripted(monkeypatch, [1.0, 2.0], "mean_reward")
    fake = zoo.evaluation.evaluate_modes

    def record(model: Any, env: Any, cfg: EvalConfig, n: int, seed: int) -> dict[str, Any]:
        seeds.append(seed)
        return fake(model, env, cfg, n, seed)

    monkeypatch.setattr(zoo.evaluation, "evaluate_modes", record)
    cfg = EvalConfig(freq=10, n_episodes=7, policies={"g": "deterministic"})
    callback = KeepBestCallback(vec_env([5]), cfg, tmp_path)
    callback.init_callback(tiny_model())
    for k in (1, 2):
        callback.num_timesteps = 10 * k
        callback.evaluate()
    assert seeds == [cfg.seed, cfg.seed]
    default = EvalConfig()
    checks = set(range(default.seed, default.seed + default.n_episodes))
    assert checks.isdisjoint(range(default.test_seed, default.test_seed + default.final_episodes))


def test_keep_best_resumes_from_its_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted(monkeypatch, [2.0, 1.9, 2.0], "mean_reward")
    model = tiny_model()
    cfg = EvalConfig(freq=10, policies={"g": "deterministic"})
    first = KeepBestCallback(vec_env([5]), cfg, tmp_path)
    first.init_callback(model)
    model.num_timesteps = first.num_timesteps = 10
    first.evaluate()
    # A resumed run builds a new callback: the best score so far comes from the file.
    second = KeepBestCallback(vec_env([5]), cfg, tmp_path)
    second.init_callback(model)
    assert second.best == 2.0
    model.num_timesteps = second.num_timesteps = 20
    assert "best" not in second.evaluate()
    assert saved_steps(tmp_path / "best_model.zip") == 10
    model.num_timesteps = second.num_timesteps = 30
    assert second.evaluate()["best"] is True
    assert saved_steps(tmp_path / "best_model.zip") == 30
    assert len(json.loads((tmp_path / "evaluations.json").read_text())) == 3


@pytest.mark.parametrize(
    ("n_envs", "freq", "steps", "expected"),
    [(1, 10, 40, [10, 20, 30, 40]), (3, 10, 30, [12, 21, 30])],
)
def test_keep_best_evaluates_where_the_step_counter_crosses_multiples_of_freq(
    tmp_path: Path, n_envs: int, freq: int, steps: int, expected: list[int]
) -> None:
    model = tiny_model(n_envs=n_envs, n_steps=1)
    cfg = EvalConfig(freq=freq, n_episodes=2, policies={"g": "deterministic"})
    seen: list[int] = []
    callback = KeepBestCallback(
        vec_env([5]), cfg, tmp_path, on_eval=lambda step, results: seen.append(step)
    )
    model.learn(steps, callback=callback)
    assert seen == expected
    history = json.loads((tmp_path / "evaluations.json").read_text())
    assert [h["step"] for h in history] == expected
    assert history[0]["g"]["n_episodes"] == 2
    assert (tmp_path / "best_model.zip").exists()


# --- seed 003's table 1 metric: final 10k training steps, from the Monitor logs ---------------


def _monitor(folder: Path, name: str, t_start: float, rows: list[tuple[float, int, float]]) -> None:
    lines = [f'#{{"t_start": {t_start}, "env_id": "x"}}', "r,l,t"]
    lines += [f"{r},{length},{t}" for r, length, t in rows]
    (folder / f"{name}.monitor.csv").write_text("\n".join(lines) + "\n")


def test_final_steps_return_orders_episodes_of_all_envs_by_end_time(tmp_path: Path) -> None:
    # env 0 ends at wall 10+1, 10+5; env 1 (started later) at 12+1, 12+2: order a, c, d, b
    _monitor(tmp_path, "train_p0_0", 10.0, [(1.0, 400, 1.0), (2.0, 300, 5.0)])
    _monitor(tmp_path, "train_p0_1", 12.0, [(10.0, 500, 1.0), (20.0, 250, 2.0)])
    _monitor(tmp_path, "train_p1_0", 100.0, [(30.0, 100, 1.0)])  # a resumed part, last
    _monitor(tmp_path, "eval_0", 200.0, [(-99.0, 10, 1.0)])  # not a training log
    # cumulative ends: a 400, c 900, d 1150, b 1450, e 1550
    result = zoo.evaluation.final_steps_return(tmp_path, 700)  # window (850, 1550]
    assert result == {
        "final_steps": 700,
        "mean_reward": pytest.approx(np.mean([10.0, 20.0, 2.0, 30.0])),
        "std_reward": pytest.approx(np.std([10.0, 20.0, 2.0, 30.0])),
        "n_episodes": 4,
        "total_steps": 1550,
    }
    assert zoo.evaluation.final_steps_return(tmp_path, 100)["mean_reward"] == 30.0
    assert zoo.evaluation.final_steps_return(tmp_path, 10_000)["n_episodes"] == 5
    empty = tmp_path / "empty"
    empty.mkdir()
    _monitor(empty, "train_0", 0.0, [])
    assert zoo.evaluation.final_steps_return(empty)["n_episodes"] == 0
    assert zoo.evaluation.final_steps_return(empty)["mean_reward"] is None
    with pytest.raises(ValueError, match="n_steps must be a positive integer, got 0"):
        zoo.evaluation.final_steps_return(tmp_path, 0)


def test_eval_final_steps_is_checked() -> None:
    assert EvalConfig().final_steps == 0
    with pytest.raises(ValueError, match=r"eval\.final_steps must be a non-negative integer"):
        EvalConfig(final_steps=-1)


@pytest.mark.slow
def test_e8_smoke_run_leads_eval_json_with_the_final_steps_return(tmp_path: Path) -> None:
    import zoo
    from zoo.cli_commands import headline

    run = zoo.train("atari_nonlocal", budget="smoke", overrides={"variant": "cnn"}, root=tmp_path)
    result = json.loads((run.path / "eval.json").read_text())
    assert next(iter(result)) == "training_return"
    training = result["training_return"]
    assert training["final_steps"] == 10_000 and training["n_episodes"] >= 2
    monitor = [zoo.evaluation.final_steps_return(run.path / "monitor", 10_000)]
    assert training == monitor[0]
    assert "stochastic" in result["policies"]
    assert headline(result).startswith("final 10000 steps return ")
    assert zoo.evaluate(run)["training_return"] == training


def test_eval_json_records_the_float_environment_it_ran_in() -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = zoo.evaluation.float_environment()
        torch.set_num_threads(2)
        two = zoo.evaluation.float_environment()
    finally:
        torch.set_num_threads(before)
    assert one["torch_threads"] == 1 and two["torch_threads"] == 2
    assert one["torch"] == torch.__version__ and one["numpy"] == np.__version__
    assert one["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    json.dumps(one)  # it goes into eval.json as it is
