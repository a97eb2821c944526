"""Tests for zoo.trainers.apg_trainer (``algo: apg``: E3's curriculum, stage 1)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from _metrics import metrics_match_own_table, same_metrics

import zoo
from attn_policies.es_policies import AttentionNeuronPolicy
from zoo.config import ConfigError
from zoo.trainers import es_rollout

LONGER = {"n_updates": 6}  # three smoke episodes of two updates


def rows(path: Path) -> list[dict[str, str]]:
    with (path / "progress.csv").open() as fh:
        return list(csv.DictReader(fh))


def state(file: Path) -> dict[str, torch.Tensor]:
    return torch.load(file, weights_only=True)


def test_smoke_hold_then_catch_and_tune_from_it(tmp_path: Path) -> None:
    hold = zoo.train("cartpole_pi_hold", budget="smoke", root=tmp_path)
    files = {p.name for p in hold.path.iterdir()}
    assert {"model.pt", "best_model.pt", "progress.csv", "evaluations.json", "eval.json"} <= files
    assert [int(r["update"]) for r in rows(hold.path)] == [1, 2, 3, 4]
    assert [bool(r["test_mean"]) for r in rows(hold.path)] == [False, True, False, True]
    assert hold.status["update"] == 4 and hold.status["num_timesteps"] == 4 * 4 * 5
    metrics_match_own_table(hold.path, ("apg/cost", "eval/test/mean_reward"))
    policy = hold.model()
    assert isinstance(policy, AttentionNeuronPolicy) and policy.num_parameters == 913
    assert zoo.evaluate(hold.path)["policies"] == hold.eval["policies"]
    assert hold.eval["updates"] == 4 and "generations" not in hold.eval
    # the tests play the run's env: upright starts, which pay about 1 a step at first
    assert hold.eval["policies"]["deterministic"]["mean_reward"] > 0.5 * 30

    catch = zoo.train(
        "cartpole_pi_catch", budget="smoke", overrides={"init": str(hold.path)}, root=tmp_path
    )
    x0 = es_rollout.init_vector(catch.config)
    best = state(hold.path / "best_model.pt")
    flat = torch.cat([best[k].reshape(-1) for k in policy.state_dict()]).numpy()
    np.testing.assert_array_equal(x0, flat.astype(np.float64))
    tune = zoo.train(
        "cartpole_pi_tune", budget="smoke", overrides={"init": str(catch.path)}, root=tmp_path
    )
    assert tune.status["state"] == "finished" and tune.status["generation"] == 2


def test_fresh_weights_follow_the_run_seed(tmp_path: Path) -> None:
    a = zoo.train("cartpole_pi_hold", budget="smoke", root=tmp_path / "a", seed=1)
    b = zoo.train("cartpole_pi_hold", budget="smoke", root=tmp_path / "b", seed=1)
    c = zoo.train("cartpole_pi_hold", budget="smoke", root=tmp_path / "c", seed=2)
    sa, sb, sc = (state(r.path / "model.pt") for r in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


class InterruptAt:
    def __init__(self, update: int) -> None:
        self.update = update

    def __call__(self, record: dict[str, Any]) -> bool:
        if record["update"] >= self.update:
            raise KeyboardInterrupt
        return True


def test_interrupt_and_resume_continue_bit_for_bit(tmp_path: Path) -> None:
    kwargs: dict[str, Any] = {"budget": "smoke", "overrides": LONGER}
    straight = zoo.train("cartpole_pi_hold", root=tmp_path / "a", **kwargs)
    with pytest.raises(KeyboardInterrupt):  # mid-episode: update 3 of episode 2
        zoo.train("cartpole_pi_hold", root=tmp_path / "b", callbacks=[InterruptAt(3)], **kwargs)
    (path,) = (tmp_path / "b" / "cartpole_pi_hold").iterdir()
    assert json.loads((path / "status.json").read_text())["state"] == "interrupted"
    assert json.loads((path / "checkpoints" / "trainer.json").read_text())["updates"] == 2
    seen: list[int] = []
    resumed = zoo.resume(path, callbacks=[lambda record: seen.append(record["update"])])
    assert seen == [3, 4, 5, 6]  # from the last finished episode
    drop = ("seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in rows(resumed.path)] == [
        {k: v for k, v in r.items() if k not in drop} for r in rows(straight.path)
    ]
    assert same_metrics(resumed.path, straight.path)
    for name in ("model.pt", "best_model.pt"):
        a, b = state(straight.path / name), state(resumed.path / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    assert resumed.eval["policies"] == straight.eval["policies"]


def test_tampered_checkpoint_is_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        zoo.train("cartpole_pi_hold", budget="smoke", root=tmp_path, callbacks=[InterruptAt(3)])
    (path,) = (tmp_path / "cartpole_pi_hold").iterdir()
    file = path / "checkpoints" / "apg.pt"
    file.write_bytes(file.read_bytes()[:100])
    with pytest.raises(ConfigError, match="unreadable APG checkpoint"):
        zoo.resume(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"env": "CartPole-v1"}, "algo apg needs an env with torch physics"),
        ({"env_kwargs": {"upright_share": 0.5}}, "the torch physics has no 'upright_share'"),
        ({"env_kwargs": {"upright": True, "start_span": [1, 1, 1, 1]}}, "give harder=True"),
        ({"cost": {"theta": 1.0}}, "unknown cost weight 'theta'"),
        ({"cost": {"x": "big"}}, "cost.x"),
        ({"window": 3}, r"multiple of window \(3\)"),
        ({"lr_schedule": "cosin"}, "lr_schedule must be one of constant, cosine.*'cosine'"),
        ({"n_updates": None}, "missing required key 'n_updates'"),
        ({"policy": "attention_nueron"}, "Did you mean 'attention_neuron'"),
        ({"init": "nowhere"}, "'init': nowhere does not exist"),
        ({"policy_kwargs": {"hidden": 10**9}}, "a policy of 7,000,000,001 parameters needs"),
    ],
)
def test_config_errors_are_one_line_and_write_nothing(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    body = {
        "algo": "apg",
        "env": "attn_envs/CartPoleSwingUp-v0",
        "env_kwargs": {"upright": True},
        "policy": "fnn",
        "n_updates": 2,
        "batch_size": 2,
        "window": 5,
        "episode_steps": 10,
        **change,
    }
    body = {k: v for k, v in body.items() if v is not None}
    config = tmp_path / "apg.yml"
    config.write_text(yaml.safe_dump({"apg": body}))
    with pytest.raises(ConfigError, match=message) as err:
        zoo.train(config, root=tmp_path / "runs")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists()
