"""Tests for attn_policies.algorithms.bc (behaviour cloning, seed 001 E4/E5), and the
bc_data datasets its sampler tests build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from attn_policies.algorithms.bc import BatchSampler, BCConfig, lr_factor, occlude_tokens, train_bc
from attn_policies.algorithms.bc_data import BCDataset, DatasetBuffer

W = np.array([[1.0, -2.0], [0.5, 0.0], [0.0, 1.5], [-1.0, 1.0]], np.float32)


def linear_data(n: int = 512, seed: int = 0) -> BCDataset:
    obs = np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)
    logits = obs @ W
    return BCDataset(obs, logits, logits.argmax(axis=1))


def test_mse_loss_decreases_and_the_student_matches_the_teacher() -> None:
    torch.manual_seed(0)
    student = nn.Linear(4, 2)
    history = train_bc(student, linear_data(), BCConfig(epochs=30, learning_rate=0.02))
    assert history[-1]["loss"] < 0.01 * history[0]["loss"]
    np.testing.assert_allclose(student.weight.detach().numpy(), W.T, atol=0.05)
    frozen = nn.Linear(4, 2)
    flat = train_bc(frozen, linear_data(), BCConfig(epochs=3, learning_rate=1e-9))
    assert flat[-1]["loss"] == pytest.approx(flat[0]["loss"], rel=1e-3)  # no learning, no drop


def test_cross_entropy_on_teacher_actions() -> None:
    torch.manual_seed(0)
    student = nn.Linear(4, 2)
    data = linear_data()
    config = BCConfig(epochs=30, learning_rate=0.05, loss="cross_entropy", grad_clip=0.0)
    history = train_bc(student, data, config)
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    predicted = student(torch.as_tensor(data.obs)).argmax(dim=1).numpy()
    assert (predicted == data.actions).mean() > 0.95


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_kl_fits_the_teachers_softmax_at_its_temperature(temperature: float) -> None:
    torch.manual_seed(0)
    student = nn.Linear(4, 2)
    data = linear_data()
    config = BCConfig(epochs=60, learning_rate=0.05, loss="kl", temperature=temperature,
                      grad_clip=0.0)  # fmt: skip
    history = train_bc(student, data, config)
    # KL >= 0; at the fit it is ~0, and float32 rounding can put it a hair below.
    assert -1e-6 <= history[-1]["loss"] < 0.02 * history[0]["loss"]
    with torch.no_grad():
        got = torch.softmax(student(torch.as_tensor(data.obs)), dim=1).numpy()
    z = data.targets / temperature
    want = np.exp(z - z.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    assert np.abs(got - want).max() < 0.05


def test_prev_action_noise_is_seeded_and_touches_only_that_entry() -> None:
    obs = {"obs": np.ones((4000, 3), np.float32), "prev_action": np.zeros((4000, 2), np.float32)}
    data = BCDataset(obs, np.zeros((4000, 1), np.float32), np.zeros(4000, np.int64))
    sampler = BatchSampler(data, BCConfig(prev_action_noise=0.03))
    index = torch.arange(4000)
    a, _, _ = sampler.batch(index, torch.Generator().manual_seed(1))
    b, _, _ = sampler.batch(index, torch.Generator().manual_seed(1))
    c, _, _ = sampler.batch(index, torch.Generator().manual_seed(2))
    assert torch.equal(a["prev_action"], b["prev_action"])  # seeded
    assert not torch.equal(a["prev_action"], c["prev_action"])
    assert a["prev_action"].std().item() == pytest.approx(0.03, rel=0.05)
    assert torch.equal(a["obs"], torch.ones(4000, 3))
    np.testing.assert_array_equal(obs["prev_action"], 0.0)  # the dataset is left alone


def test_occlusion_keeps_the_same_number_of_tokens_per_sample_in_order() -> None:
    tokens = torch.arange(2 * 10 * 3, dtype=torch.float32).view(2, 10, 3)
    kept = occlude_tokens(tokens, 0.7, torch.Generator().manual_seed(0))
    assert kept.shape == (2, 3, 3)
    for sample, original in zip(kept, tokens, strict=True):
        rows = [int(r[0]) // 3 % 10 for r in sample]
        assert rows == sorted(set(rows))  # distinct tokens, original order
        assert all(torch.equal(r, original[i]) for r, i in zip(sample, rows, strict=True))
    assert occlude_tokens(tokens, 0.0, torch.Generator()).shape == (2, 10, 3)
    obs = {"tokens": tokens.numpy(), "prev_action": np.zeros((2, 1), np.float32)}
    data = BCDataset(obs, np.zeros((2, 1), np.float32), np.zeros(2, np.int64))
    index = torch.arange(2)
    config = BCConfig(occlusion=(0.5, 0.5), tokens_key="tokens")
    batch, _, _ = BatchSampler(data, config).batch(index, torch.Generator())
    assert batch["tokens"].shape == (2, 5, 3) and batch["prev_action"].shape == (2, 1)
    ranged = BatchSampler(data, BCConfig(occlusion=(0.2, 0.6), tokens_key="tokens"))
    g = torch.Generator().manual_seed(3)
    kept = {ranged.batch(index, g)[0]["tokens"].shape[1] for _ in range(200)}
    assert kept == {4, 5, 6, 7, 8}  # one ratio per batch, drawn in [0.2, 0.6]
    a, b = (occlude_tokens(tokens, 0.5, torch.Generator().manual_seed(9)) for _ in range(2))
    assert torch.equal(a, b)  # seeded


def _occlude_reference(tokens: np.ndarray, ratio: float, g: torch.Generator) -> np.ndarray:
    """Occlusion by numpy indexing, with occlude_tokens's draw: argsort of uniform scores."""
    b, n = tokens.shape[:2]
    keep = max(1, round((1.0 - ratio) * n))
    if keep == n:
        return tokens
    kept = torch.rand(b, n, generator=g).argsort(dim=1)[:, :keep].sort(dim=1).values
    return tokens[np.arange(b)[:, None], kept.numpy()]


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.5, 0.7, 0.99])
@pytest.mark.parametrize(
    "tokens",
    [
        torch.randint(0, 256, (7, 196, 144), generator=torch.Generator().manual_seed(0)).byte(),
        torch.randn(5, 12, 3, 2, generator=torch.Generator().manual_seed(1)),
        torch.randn(4, 10, 6, generator=torch.Generator().manual_seed(2)).transpose(0, 1)[:4],
        torch.arange(60).view(6, 10),
    ],
    ids=["uint8", "4d", "strided", "2d"],
)
def test_vectorised_occlusion_equals_the_reference(tokens: torch.Tensor, ratio: float) -> None:
    b, n = tokens.shape[:2]
    keep = max(1, round((1.0 - ratio) * n))
    for seed in range(3):
        fast = occlude_tokens(tokens, ratio, torch.Generator().manual_seed(seed))
        assert fast.dtype == tokens.dtype and fast.shape == (b, keep, *tokens.shape[2:])
        reference = _occlude_reference(tokens.numpy(), ratio, torch.Generator().manual_seed(seed))
        assert torch.equal(fast, torch.as_tensor(reference))
        assert torch.equal(fast, occlude_tokens(tokens, ratio, torch.Generator().manual_seed(seed)))
    # exactly `keep` distinct tokens per sample, in their original order
    ids = torch.arange(b * n).view(b, n)
    kept = occlude_tokens(ids, ratio, torch.Generator().manual_seed(0))
    for i in range(b):
        rows = kept[i] - i * n
        assert len(rows) == keep and bool((rows[1:] > rows[:-1]).all())


def _reference_batch(data: BCDataset, index: np.ndarray, config: BCConfig, g: torch.Generator):
    """The batch of the samples ``index`` written plainly: numpy indexing, then the draws in
    BatchSampler's order (the occlusion ratio, the previous-action noise, the kept tokens),
    then tensors (float arrays as float32)."""

    def tensor(values: np.ndarray | torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(values)
        return t.float() if t.is_floating_point() else t

    occlusion = config.occlusion
    low, high = occlusion if isinstance(occlusion, tuple) else (occlusion, occlusion)
    ratio = low + (high - low) * float(torch.rand((), generator=g))
    if isinstance(data.obs, dict):
        obs = {k: v[index] for k, v in data.obs.items()}
        key = config.prev_action_key
        if config.prev_action_noise and key in obs:
            prev = tensor(obs[key]).float()
            obs[key] = prev + torch.randn(prev.shape, generator=g) * config.prev_action_noise
        if ratio and config.tokens_key:
            obs[config.tokens_key] = _occlude_reference(obs[config.tokens_key], ratio, g)
        batch = {k: tensor(v) for k, v in obs.items()}
    else:
        batch = tensor(_occlude_reference(data.obs[index], ratio, g) if ratio else data.obs[index])
    return batch, tensor(data.targets[index]), torch.as_tensor(data.actions[index])


def _reference_epoch(data: BCDataset, config: BCConfig, rng, g):  # train_bc's loop, plainly
    order = rng.permutation(len(data))
    for start in range(0, len(order), config.batch_size):
        yield _reference_batch(data, order[start : start + config.batch_size], config, g)


def _assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert list(a) == list(b)  # same entries, same order
        for key in a:
            _assert_same(a[key], b[key])
        return
    assert a.dtype == b.dtype and torch.equal(a, b)


def _datasets() -> dict[str, tuple[BCDataset, BCConfig]]:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, (50, 20, 12), dtype=np.uint8)
    prev = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 50)]
    logits = rng.normal(size=(50, 3))  # float64: batches hold float32
    actions = rng.integers(0, 3, 50)
    readonly = tokens.copy()
    readonly.flags.writeable = False
    box = rng.normal(size=(50, 8, 5))
    return {
        "pong": (
            BCDataset({"observation": tokens, "prev_action": prev}, logits, actions),
            BCConfig(batch_size=16, occlusion=0.5, tokens_key="observation"),
        ),
        "noise and ranged occlusion, tokens last": (
            BCDataset({"prev_action": prev, "observation": readonly}, logits, actions),
            BCConfig(
                batch_size=16,
                occlusion=(0.1, 0.8),
                tokens_key="observation",
                prev_action_noise=0.1,
            ),
        ),
        "no occlusion": (
            BCDataset({"observation": tokens, "prev_action": prev}, logits, actions),
            BCConfig(batch_size=16, prev_action_noise=0.03),
        ),
        "float64 strided box tokens": (
            BCDataset(box.transpose(0, 2, 1)[:, ::2], logits, logits[:, :2]),
            BCConfig(batch_size=7, occlusion=0.3),
        ),
        "dtype torch cannot view": (
            BCDataset(
                {"observation": tokens.astype(np.uint16), "prev_action": prev},
                logits,
                actions.astype(np.uint32),
            ),
            BCConfig(batch_size=16, occlusion=0.25, tokens_key="observation"),
        ),
    }


@pytest.mark.parametrize("name", list(_datasets()))
def test_batch_sampler_equals_the_plain_reference(name: str) -> None:
    data, config = _datasets()[name]
    sampler = BatchSampler(data, config)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    g_a, g_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(3):  # epochs
        expected = list(_reference_epoch(data, config, rng_a, g_a))
        got = list(sampler.epoch(rng_b, g_b))
        assert len(expected) == len(got) == -(-len(data) // config.batch_size)
        for a, b in zip(expected, got, strict=True):
            for x, y in zip(a, b, strict=True):
                _assert_same(x, y)


def test_train_bc_fits_the_sampler_batches() -> None:
    """train_bc fits the reference batches, epoch after epoch, drawn from its seeded generators."""
    data, config = _datasets()["noise and ranged occlusion, tokens last"]
    seen = []

    class Recorder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(12, 3)

        def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
            seen.append(obs)
            return self.head(obs["observation"].float().mean(dim=1)) + obs["prev_action"]

    train_bc(Recorder(), data, dataclasses.replace(config, epochs=2, seed=3))
    rng, g = np.random.default_rng(3), torch.Generator().manual_seed(3)
    expected = [obs for _ in range(2) for obs, _, _ in _reference_epoch(data, config, rng, g)]
    assert len(seen) == len(expected) == 8
    for a, b in zip(seen, expected, strict=True):
        _assert_same(a, b)


class MeanPoolStudent(nn.Module):
    """A token-count-agnostic student: mean over tokens, then linear."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(3, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(tokens.mean(dim=1))


def test_training_with_occlusion_on_token_inputs() -> None:
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(256, 12, 3)).astype(np.float32)
    targets = tokens.mean(axis=1) @ np.array([[2.0], [-1.0], [0.5]], np.float32)
    torch.manual_seed(0)
    data = BCDataset(tokens, targets, np.zeros(256, np.int64))
    history = train_bc(
        MeanPoolStudent(), data, BCConfig(epochs=40, learning_rate=0.05, occlusion=0.25)
    )
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]


def test_config_validation() -> None:
    for field, bad in (("batch_size", 0), ("epochs", True), ("epochs", 2.5)):
        with pytest.raises(ValueError, match=f"{field} must be a positive integer"):
            BCConfig(**{field: bad})
    with pytest.raises(ValueError, match="learning_rate must be > 0"):
        BCConfig(learning_rate=0.0)
    with pytest.raises(ValueError, match="loss must be 'mse', 'cross_entropy' or 'kl'"):
        BCConfig(loss="l1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="temperature must be > 0"):
        BCConfig(loss="kl", temperature=0.0)
    with pytest.raises(ValueError, match="occlusion"):
        BCConfig(occlusion=1.0)
    with pytest.raises(ValueError, match="prev_action_noise"):
        BCConfig(prev_action_noise=-0.1)
    with pytest.raises(ValueError, match="epoch_samples"):
        BCConfig(epoch_samples=-1)
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        BCConfig(lr_schedule="step")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lr_epochs"):
        BCConfig(lr_epochs=-2)
    tokens = {"tokens": np.zeros((4, 5, 3), np.float32), "prev": np.zeros((4, 2), np.float32)}
    data = BCDataset(tokens, np.zeros((4, 1), np.float32), np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="tokens_key"):  # would silently not occlude
        train_bc(MeanPoolStudent(), data, BCConfig(occlusion=0.5))
    with pytest.raises(ValueError, match="'prev_action'"):  # would silently not add noise
        train_bc(MeanPoolStudent(), data, BCConfig(prev_action_noise=0.03))
    empty = BCDataset(np.zeros((0, 5, 3)), np.zeros((0, 1)), np.zeros(0))
    with pytest.raises(ValueError, match="empty"):
        train_bc(MeanPoolStudent(), empty, BCConfig())
    with pytest.raises(ValueError, match="one length"):
        BCDataset(tokens, np.zeros((3, 1)), np.zeros(4))


def test_dataset_save_load_and_concatenate(tmp_path: Path) -> None:
    def arrays(data: BCDataset) -> dict[str, np.ndarray]:
        obs = data.obs if isinstance(data.obs, dict) else {"": data.obs}
        return {**obs, "targets": data.targets, "actions": data.actions}

    for name, (data, _) in _datasets().items():
        loaded = BCDataset.load(data.save(tmp_path / f"{len(name)}.npz"))
        assert list(arrays(loaded)) == list(arrays(data))  # same entries, same order
        for key, value in arrays(data).items():  # same values and dtypes (uint8 stays uint8)
            assert arrays(loaded)[key].dtype == value.dtype, key
            np.testing.assert_array_equal(arrays(loaded)[key], value)
        both = BCDataset.concatenate([data, loaded])
        assert len(both) == 2 * len(data)
        np.testing.assert_array_equal(both.targets[len(data) :], data.targets)
    with pytest.raises(ValueError, match="plain identifier"):
        BCDataset({"../x": np.zeros(2)}, np.zeros((2, 1)), np.zeros(2)).save(tmp_path / "b.npz")
    with pytest.raises(ValueError, match="no datasets"):
        BCDataset.concatenate([])


def test_dataset_buffer_equals_concatenation_and_copies_each_part_once() -> None:
    for name, (data, _) in _datasets().items():
        parts = [data, linear_like(data, 1), linear_like(data, 2)]
        buffer = DatasetBuffer(capacity=3 * len(data) + 5)
        views = []
        for i, part in enumerate(parts):
            buffer.append(part)
            views.append(buffer.data)
            expected = BCDataset.concatenate(parts[: i + 1])
            got = buffer.data
            assert len(got) == len(expected), name
            exp_obs = expected.obs if isinstance(expected.obs, dict) else {"": expected.obs}
            got_obs = got.obs if isinstance(got.obs, dict) else {"": got.obs}
            for key, value in exp_obs.items():
                assert got_obs[key].dtype == value.dtype
                np.testing.assert_array_equal(got_obs[key], value)
            np.testing.assert_array_equal(got.targets, expected.targets)
            np.testing.assert_array_equal(got.actions, expected.actions)
        # views share the buffer: appending later parts never moved the earlier samples
        first = views[0].obs if not isinstance(views[0].obs, dict) else views[0].obs["observation"]
        last = (
            views[-1].obs if not isinstance(views[-1].obs, dict) else views[-1].obs["observation"]
        )
        assert np.shares_memory(first, last)
    with pytest.raises(ValueError, match="do not fit"):
        buffer.append(data)
    with pytest.raises(ValueError, match="empty"):
        _ = DatasetBuffer(capacity=2).data
    dict_part = BCDataset({"a": np.zeros((2, 1))}, np.zeros((2, 1)), np.zeros(2))
    mixed = DatasetBuffer(capacity=8)
    mixed.append(dict_part)
    with pytest.raises(ValueError, match="observation entries"):
        mixed.append(BCDataset({"b": np.zeros((2, 1))}, np.zeros((2, 1)), np.zeros(2)))
    with pytest.raises(ValueError, match="observation entries"):
        mixed.append(BCDataset(np.zeros((2, 1)), np.zeros((2, 1)), np.zeros(2)))


def linear_like(data: BCDataset, shift: int) -> BCDataset:
    """``data`` with every value moved by ``shift`` (same shapes and dtypes)."""

    def moved(values: np.ndarray) -> np.ndarray:
        return (values + shift).astype(values.dtype)

    obs = (
        {k: moved(v) for k, v in data.obs.items()}
        if isinstance(data.obs, dict)
        else moved(data.obs)
    )
    return BCDataset(obs, moved(data.targets), moved(data.actions))


def test_epoch_samples_draws_a_fresh_subset_of_that_size_each_epoch() -> None:
    data = linear_data(100)
    sampler = BatchSampler(data, BCConfig(batch_size=16, epoch_samples=40))
    rng, g = np.random.default_rng(0), torch.Generator().manual_seed(0)
    epochs = [list(sampler.epoch(rng, g)) for _ in range(2)]
    for batches in epochs:
        assert [len(t) for _, t, _ in batches] == [16, 16, 8]
        assert len(sampler) == len(batches)
    seen = [torch.cat([o for o, _, _ in batches]) for batches in epochs]
    assert len(torch.unique(seen[0], dim=0)) == 40  # no sample twice within an epoch
    assert not torch.equal(seen[0], seen[1])  # a different subset the next epoch
    # the first 40 of the same permutation the full epoch would use
    full = BatchSampler(data, BCConfig(batch_size=40))
    (whole, _, _), *_ = full.epoch(np.random.default_rng(0), torch.Generator().manual_seed(0))
    torch.testing.assert_close(seen[0], whole)
    big = BatchSampler(data, BCConfig(batch_size=64, epoch_samples=1000))  # more than the data
    assert sum(len(t) for _, t, _ in big.epoch(rng, g)) == 100
    assert len(big) == len(list(big.epoch(rng, g))) == 2


class DictStudent(nn.Module):
    """Mean of the (occluded) tokens and the previous action, then linear to 3 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.prev = nn.Linear(12, 3), nn.Linear(3, 3)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.tokens(obs["observation"].float().mean(dim=1) / 255) + self.prev(
            obs["prev_action"]
        )


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
@pytest.mark.parametrize("name", ["pong", "noise and ranged occlusion, tokens last"])
def test_train_bc_resumes_from_its_checkpoint_bit_for_bit(
    name: str, schedule: str, tmp_path: Path
) -> None:
    data, config = _datasets()[name]
    config = dataclasses.replace(config, epochs=4, lr_schedule=schedule)
    torch.manual_seed(0)
    straight = DictStudent()
    initial = {k: v.clone() for k, v in straight.state_dict().items()}
    expected = train_bc(straight, data, config)

    first = DictStudent()
    first.load_state_dict(initial)
    ckpt = tmp_path / "ckpt" / "bc_last.pt"

    # stopped after epoch 2 (the kill of a callback, e.g. during a test, is epoch 3 here)
    def stop_at_2(row: dict[str, float]) -> bool:
        return row["epoch"] < 2

    assert len(train_bc(first, data, config, stop_at_2, checkpoint=ckpt)) == 2
    resumed = DictStudent()  # fresh weights: the checkpoint replaces them
    seen: list[float] = []
    history = train_bc(resumed, data, config, lambda r: seen.append(r["epoch"]), checkpoint=ckpt)
    assert history == expected and seen == [3.0, 4.0]
    for key, value in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value, rtol=0, atol=0)
    # a finished checkpoint: nothing left to train, the student is the final one
    again = DictStudent()
    assert train_bc(again, data, config, checkpoint=ckpt) == expected
    torch.testing.assert_close(again.state_dict(), straight.state_dict(), rtol=0, atol=0)


def test_lr_schedules_decay_to_zero_over_lr_epochs_and_stay_there() -> None:
    for schedule in ("linear", "cosine"):
        config = BCConfig(epochs=10, lr_schedule=schedule, lr_epochs=4)
        factors = [lr_factor(config, e) for e in np.linspace(0, 6, 25)]
        assert factors[0] == 1.0 and factors[8] == pytest.approx(0.5)  # half way: epoch 2
        assert np.all(np.diff(factors) <= 0) and factors[16:] == [0.0] * 9
    assert lr_factor(BCConfig(epochs=4, lr_schedule="linear"), 1.0) == 0.75  # over `epochs`
    assert lr_factor(BCConfig(epochs=4), 3.9) == 1.0


def test_a_decayed_step_size_moves_the_weights_less_and_zero_not_at_all() -> None:
    data = linear_data(256)

    def moved(**kwargs: object) -> list[float]:
        torch.manual_seed(0)
        student = nn.Linear(4, 2)
        start = [p.detach().clone() for p in student.parameters()]
        distances = []

        def measure(row: dict[str, float]) -> None:
            now = torch.cat([p.detach().flatten() for p in student.parameters()])
            distances.append(float((now - torch.cat([p.flatten() for p in start])).norm()))

        config = BCConfig(epochs=3, batch_size=32, learning_rate=0.05, **kwargs)  # type: ignore[arg-type]
        train_bc(student, data, config, measure)
        return distances

    constant, linear = moved(), moved(lr_schedule="linear", lr_epochs=1)
    # epoch 1 decays from the full step to 0, after it the weights stay where they are
    assert 0 < linear[0] < constant[0]
    assert linear[1] == linear[2] == linear[0]
    assert constant[2] != constant[1]
