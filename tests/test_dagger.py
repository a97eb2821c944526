"""Tests for attn_policies.algorithms.dagger (DAgger cloning of a recurrent ES policy)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from attn_envs.envs.cartpole_swingup_vector import CartPoleSwingUpVectorEnv
from attn_policies.algorithms.dagger import (
    DAgger,
    DAggerConfig,
    Episodes,
    _with_prev_action,
    beta_of,
    collect,
    fit_epoch,
    teacher_action,
)
from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy


def env_fn(n: int) -> CartPoleSwingUpVectorEnv:
    return CartPoleSwingUpVectorEnv(n, harder=True, max_episode_steps=1000, autoreset=False)


CFG = DAggerConfig(n_envs=6, max_steps=40, window=8, seed=3)


def make(seed: int = 0) -> tuple[AttentionNeuronPolicy, FNNPolicy]:
    torch.manual_seed(seed)
    return AttentionNeuronPolicy.cartpole(), FNNPolicy(5, 1, 8)


def test_beta_schedule_is_teacher_first_then_half_and_none() -> None:
    assert [beta_of(r) for r in range(5)] == [1.0, 0.5, 0.0, 0.5, 0.0]


def test_collect_mixes_as_told_and_shuffles_once_per_episode() -> None:
    student, teacher = make()
    led = collect(student, teacher, env_fn, CFG, beta=1.0, seed=0)
    np.testing.assert_array_equal(led.actions, led.targets)  # the teacher drives every copy
    own = collect(student, teacher, env_fn, CFG, beta=0.0, seed=0)
    assert not np.allclose(own.actions, own.targets)
    assert own.obs.shape == (40, 6, 5) and own.actions.shape == own.targets.shape == (40, 6, 1)
    assert (np.sort(own.perm, axis=1) == np.arange(5)).all()  # a permutation per copy
    assert len({tuple(p) for p in own.perm}) > 1  # ... drawn per copy
    assert (np.diff(own.alive.astype(int), axis=0) <= 0).all()  # alive only ever ends
    np.testing.assert_array_equal(own.obs[0], led.obs[0])  # same seed, same starts
    flat = collect(student, teacher, env_fn, dataclasses.replace(CFG, shuffle_inputs=False), 0, 0)
    assert (flat.perm == np.arange(5)).all()


def test_handover_gives_the_teacher_a_prefix_and_the_student_the_rest() -> None:
    """With ``handover`` each teacher-driven copy plays the teacher's actions up to a step
    drawn per copy from [0, H), then exactly the student's own (replayed here)."""
    student, teacher = make()
    data = collect(student, teacher, env_fn, dataclasses.replace(CFG, handover=30), 1.0, 0)
    obs = torch.as_tensor(np.take_along_axis(data.obs, data.perm[None], axis=2))
    actions = torch.as_tensor(data.actions)
    state, own = None, []
    with torch.no_grad():
        for t in range(len(obs)):
            if t > 0:
                state = _with_prev_action(state, actions[t - 1])
            out, state = student(obs[t], state)
            own.append(out.numpy())
    own_actions = np.stack(own)
    alive = data.alive.astype(bool)
    switches = []
    for b in range(data.alive.shape[1]):
        teacher_steps = np.isclose(data.actions[:, b, 0], data.targets[:, b, 0]) & alive[:, b]
        switch = int(np.argmin(teacher_steps)) if not teacher_steps.all() else len(obs)
        assert teacher_steps[:switch].all() and switch < 30
        np.testing.assert_allclose(
            own_actions[switch:, b][alive[switch:, b]], data.actions[switch:, b][alive[switch:, b]]
        )
        switches.append(switch)
    assert len(set(switches)) > 1  # drawn per copy
    # beta 0 copies never get the teacher, handover or not
    plain = collect(student, teacher, env_fn, CFG, 0.0, 0)
    handed = collect(student, teacher, env_fn, dataclasses.replace(CFG, handover=30), 0.0, 0)
    np.testing.assert_array_equal(handed.obs[0], plain.obs[0])
    assert not np.isclose(handed.actions[0], handed.targets[0]).any()


def test_fit_replays_collection_exactly() -> None:
    """Training unrolls the student on the same shuffled inputs, carrying its state across
    windows, as collection did: with its own actions as targets the loss is zero (lr 0); a
    state reset between windows breaks this (checked by mutation)."""
    student, teacher = make()
    data = collect(student, teacher, env_fn, CFG, beta=0.0, seed=1)
    data.targets = data.actions.copy()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.0)
    assert fit_epoch(student, optimizer, data, CFG) == pytest.approx(0.0, abs=1e-10)


def test_fit_feeds_the_played_previous_action() -> None:
    student, teacher = make()
    data = collect(student, teacher, env_fn, CFG, beta=1.0, seed=1)  # the teacher played
    optimizer = torch.optim.SGD(student.parameters(), lr=0.0)
    played = fit_epoch(student, optimizer, data, CFG)
    data.actions = np.zeros_like(data.actions)
    assert fit_epoch(student, optimizer, data, CFG) != pytest.approx(played, rel=1e-4)


def test_fit_epochs_reduce_the_imitation_loss() -> None:
    student, teacher = make()
    data = collect(student, teacher, env_fn, CFG, beta=1.0, seed=2)
    optimizer = torch.optim.Adam(student.parameters(), lr=CFG.learning_rate)
    losses = [fit_epoch(student, optimizer, data, CFG) for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_save_and_restore_continue_bit_for_bit(tmp_path: Path) -> None:
    cfg = dataclasses.replace(CFG, keep_rounds=2)
    straight = DAgger(*make(), env_fn, cfg)
    records = [straight.step() for _ in range(3)]
    assert [r["beta"] for r in records] == [1.0, 0.5, 0.0]
    assert records[-1]["env_steps"] == straight.env_steps > 0

    first = DAgger(*make(), env_fn, cfg)
    first.step(), first.step()
    first.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "round-1.npz",
        "round-2.npz",
        "student-2.pt",
        "trainer.json",
    ]
    student = make(seed=9)[0]  # other weights: the student's must come from the checkpoint
    resumed = DAgger(student, make()[1], env_fn, cfg)
    resumed.restore(tmp_path)
    assert resumed.step() == records[-1]
    for a, b in zip(straight.student.parameters(), resumed.student.parameters(), strict=True):
        assert torch.equal(a, b)
    resumed.save(tmp_path)  # the dropped round's data goes
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["round-2.npz", "round-3.npz"]
    assert [p.name for p in tmp_path.glob("student-*.pt")] == ["student-3.pt"]


def test_teacher_may_return_action_or_action_and_state() -> None:
    student, teacher = make()
    plain = collect(student, lambda o: teacher(o)[0], env_fn, CFG, beta=1.0, seed=4)
    paired = collect(student, teacher, env_fn, CFG, beta=1.0, seed=4)
    np.testing.assert_array_equal(plain.targets, paired.targets)


def test_dagger_rounds_match_the_e3_golden_figures() -> None:
    """The default (E3) path stepped in torch, pinned to figures of the code before the BC
    options existed (the compiled window: test_compiled_window_fits_as_the_torch_steps)."""
    cfg = dataclasses.replace(CFG, keep_rounds=2, compiled=False)
    dagger = DAgger(*make(), env_fn, cfg)
    records = [dagger.step() for _ in range(4)]
    assert records[-1]["env_steps"] == 785
    assert records[-1]["loss"] == pytest.approx(0.06292066164314747, rel=1e-6)
    flat = torch.nn.utils.parameters_to_vector(dagger.student.parameters()).detach()
    assert float(flat.double().sum()) == pytest.approx(0.5495666193019133, rel=1e-6)


def test_compiled_window_fits_as_the_torch_steps() -> None:
    """An AttentionNeuron student fitted with its compiled window (the default) follows the
    torch step-by-step fit: the same data, losses and weights to float tolerance."""
    cfg = dataclasses.replace(CFG, keep_rounds=2, prev_action_noise=0.03, batch_episodes=3)
    runs = [DAgger(*make(), env_fn, dataclasses.replace(cfg, compiled=c)) for c in (True, False)]
    for _ in range(4):
        fast, slow = (d.step() for d in runs)
        assert fast["env_steps"] == slow["env_steps"]
        assert fast["loss"] == pytest.approx(slow["loss"], rel=1e-4)
    weights = [torch.nn.utils.parameters_to_vector(d.student.parameters()) for d in runs]
    assert (weights[0] - weights[1]).abs().max() < 1e-4
    start = torch.nn.utils.parameters_to_vector(make()[0].parameters())
    assert (weights[0] - start).abs().max() > 1e-3  # it did learn


def test_beta_may_be_teacher_only_or_a_constant() -> None:
    assert [DAggerConfig(beta="teacher").beta_at(r) for r in range(4)] == [1.0] * 4
    assert [DAggerConfig(beta=0.25).beta_at(r) for r in range(3)] == [0.25] * 3
    assert [DAggerConfig().beta_at(r) for r in range(5)] == [beta_of(r) for r in range(5)]
    dagger = DAgger(*make(), env_fn, dataclasses.replace(CFG, beta="teacher", keep_rounds=4))
    for _ in range(3):
        assert dagger.step()["beta"] == 1.0
    for data in dagger.datasets:
        np.testing.assert_array_equal(data.actions, data.targets)


class Recorder(torch.nn.Module):
    """A student that logs the batch size and previous action it is fed (one weight to fit)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.batches: list[int] = []
        self.fed: list[torch.Tensor] = []

    def forward(self, obs: torch.Tensor, state: object = None) -> tuple[torch.Tensor, object]:
        from attn_policies.es_policies import PolicyState

        self.batches.append(obs.shape[0])
        if state is not None:
            self.fed.append(state.prev_action.detach().clone())
        action = self.w * obs[:, :1]
        return action, PolicyState(keys=None, prev_action=action)  # type: ignore[arg-type]


def episodes(t: int, b: int, seed: int = 0) -> Episodes:
    rng = np.random.default_rng(seed)
    return Episodes(
        obs=rng.standard_normal((t, b, 5)).astype(np.float32),
        perm=np.tile(np.arange(5), (b, 1)),
        actions=rng.standard_normal((t, b, 1)).astype(np.float32),
        targets=rng.standard_normal((t, b, 1)).astype(np.float32),
        alive=np.ones((t, b), bool),
    )


@pytest.mark.parametrize("sigma", [0.0, 0.5])
def test_previous_action_noise_is_added_only_when_asked(sigma: float) -> None:
    data, student = episodes(40, 6), Recorder()
    cfg = dataclasses.replace(CFG, prev_action_noise=sigma)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.0)
    fit_epoch(student, optimizer, data, cfg, torch.Generator().manual_seed(0))
    fed = torch.stack(student.fed)  # steps 1..39, fed a_{t-1}
    noise = fed - torch.as_tensor(data.actions[:-1])
    assert float(noise.std()) == pytest.approx(sigma, abs=0.1)
    if not sigma:
        assert torch.equal(noise, torch.zeros_like(noise))
    with pytest.raises(ValueError, match="need a generator"):
        fit_epoch(student, optimizer, data, dataclasses.replace(cfg, batch_episodes=2))


def test_minibatches_of_whole_trajectories_cover_every_episode_once() -> None:
    """batch_episodes=4 over 10 episodes of 40 steps: batches of 4, 4, 2, each unrolled over
    all 40 steps (state carried across the windows of 8), every episode in exactly one."""
    data, student = episodes(40, 10), Recorder()
    data.obs[:, :, 0] = np.arange(10)  # episode i's first input is i at every step
    seen: list[float] = []
    hook = student.register_forward_pre_hook(lambda m, args: seen.append(args[0][:, 0].tolist()))
    cfg = dataclasses.replace(CFG, batch_episodes=4)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.0)
    fit_epoch(student, optimizer, data, cfg, torch.Generator().manual_seed(1))
    hook.remove()
    assert student.batches == [4] * 40 + [4] * 40 + [2] * 40
    assert len(student.fed) == 3 * 39  # the state goes on across windows, reset per batch
    firsts = [tuple(seen[i]) for i in (0, 40, 80)]
    assert sorted(x for batch in firsts for x in batch) == list(range(10))
    assert firsts != [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]  # drawn, not in order


def test_collect_rounds_collect_first_then_train_epochs_on_all_of_it() -> None:
    cfg = dataclasses.replace(
        CFG, beta="teacher", collect_rounds=3, n_envs=4, batch_episodes=5, keep_rounds=1
    )
    student = Recorder()
    dagger = DAgger(student, make()[1], env_fn, cfg)
    records = [dagger.step() for _ in range(3)]
    assert all(np.isnan(r["loss"]) for r in records)  # collection only
    # teacher-only collection never runs the student
    assert student.batches == [] and float(student.w.detach()) == 0.0
    assert len(dagger.datasets) == 3 and dagger.dataset_rounds == [1, 2, 3]
    steps, length = dagger.env_steps, max(d.alive.shape[0] for d in dagger.datasets)
    for epoch in range(2):
        student.batches.clear()
        assert not np.isnan(dagger.step()["loss"])
        # one pass over all 12 episodes, in minibatches of 5, 5, 2 whole trajectories
        assert student.batches == [5] * length + [5] * length + [2] * length, epoch
    assert dagger.env_steps == steps and len(dagger.datasets) == 3  # no more data
    assert float(student.w.detach()) != 0.0


def test_bc_mode_save_and_restore_continue_bit_for_bit(tmp_path: Path) -> None:
    cfg = dataclasses.replace(
        CFG, beta="teacher", collect_rounds=2, batch_episodes=4, prev_action_noise=0.03
    )
    straight = DAgger(*make(), env_fn, cfg)
    records = [straight.step() for _ in range(5)]
    for stop in (1, 3):  # mid-collection and mid-training
        first = DAgger(*make(), env_fn, cfg)
        for _ in range(stop):
            first.step()
        first.save(tmp_path / str(stop))
        resumed = DAgger(make(seed=9)[0], make()[1], env_fn, cfg)
        resumed.restore(tmp_path / str(stop))
        assert repr([resumed.step() for _ in range(5 - stop)]) == repr(records[stop:])  # NaN
        for a, b in zip(straight.student.parameters(), resumed.student.parameters(), strict=True):
            assert torch.equal(a, b)
    assert sorted(p.name for p in (tmp_path / "3").glob("*.npz")) == [
        "round-1.npz",
        "round-2.npz",
    ]


def test_a_checkpoint_without_its_teacher_data_collects_it_again(tmp_path: Path) -> None:
    """BC mode (the teacher drives every round): a checkpoint committed without its
    round-*.npz files restores by playing those rounds again, the same data to the bit, and
    goes on bit for bit; a DAgger round that mixed in the student cannot be, one error."""
    cfg = dataclasses.replace(CFG, beta="teacher", collect_rounds=2, batch_episodes=4)
    straight = DAgger(*make(), env_fn, cfg)
    records = [straight.step() for _ in range(4)]
    first = DAgger(*make(), env_fn, cfg)
    for _ in range(3):
        first.step()
    first.save(tmp_path / "bc")
    for data in (tmp_path / "bc").glob("round-*.npz"):
        data.unlink()
    resumed = DAgger(make(seed=9)[0], make()[1], env_fn, cfg)
    resumed.restore(tmp_path / "bc")
    for again, kept in zip(resumed.datasets, first.datasets, strict=True):
        for name in ("obs", "perm", "actions", "targets", "alive"):
            np.testing.assert_array_equal(getattr(again, name), getattr(kept, name))
    assert repr([resumed.step()]) == repr(records[3:])
    mixed = DAgger(*make(), env_fn, dataclasses.replace(CFG, keep_rounds=3))
    for _ in range(3):
        mixed.step()
    mixed.save(tmp_path / "dagger")
    (tmp_path / "dagger" / "round-2.npz").unlink()  # beta 0.5: the student played too
    with pytest.raises(FileNotFoundError, match="round 2 mixed in the student's own actions"):
        DAgger(*make(), env_fn, dataclasses.replace(CFG, keep_rounds=3)).restore(
            tmp_path / "dagger"
        )


@pytest.mark.parametrize(
    "field, value",
    [
        ("beta", "sometimes"),
        ("beta", 1.5),
        ("collect_rounds", -1),
        ("batch_episodes", 2.0),
        ("prev_action_noise", -0.1),
        ("n_envs", 0),
        ("window", 0),
        ("max_steps", 1.5),
        ("keep_rounds", True),
        ("learning_rate", 0.0),
        ("max_grad_norm", -1),
        ("handover", -5),
        ("handover", 2.5),
        ("teacher_action_noise", -0.1),
    ],
)
def test_bad_config_is_a_value_error(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"DAggerConfig.{field}"):
        DAggerConfig(**{field: value})


def test_teacher_action_noise_perturbs_what_is_played_never_the_target() -> None:
    student, teacher = make()
    clean = collect(student, teacher, env_fn, CFG, beta=1.0, seed=0)
    noisy_cfg = dataclasses.replace(CFG, teacher_action_noise=0.3)
    noisy = collect(student, teacher, env_fn, noisy_cfg, beta=1.0, seed=0)
    alive = noisy.alive.astype(bool)
    # the target is the teacher's action on the states actually reached
    with torch.no_grad():
        replay = teacher_action(teacher, torch.as_tensor(noisy.obs.reshape(-1, 5))).numpy()
    np.testing.assert_allclose(noisy.targets.reshape(-1, 1), replay, rtol=1e-5, atol=1e-6)
    gap = (noisy.actions - noisy.targets)[alive]
    assert (np.abs(noisy.actions) <= 1.0).all()  # clipped to the action space
    unclipped = np.abs(noisy.actions[alive]) < 1.0
    assert 0.2 < float(gap[unclipped].std()) < 0.4
    np.testing.assert_array_equal(noisy.obs[0], clean.obs[0])  # the same starts
    assert not np.allclose(noisy.obs[5:], clean.obs[5:])  # ... then other states
    # 0 draws nothing: the same episodes as a config without the key
    zero = collect(
        student, teacher, env_fn, dataclasses.replace(CFG, teacher_action_noise=0.0), 1.0, 0
    )
    np.testing.assert_array_equal(zero.obs, clean.obs)
    # the student-driven copies are untouched by it
    own = collect(student, teacher, env_fn, noisy_cfg, beta=0.0, seed=0)
    plain = collect(student, teacher, env_fn, CFG, beta=0.0, seed=0)
    np.testing.assert_array_equal(own.actions, plain.actions)
