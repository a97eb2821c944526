"""FrameStore / StackedFrames: stacked tokens held as distinct frames read back exactly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attn_envs  # noqa: F401  (registers the envs)
from attn_policies.algorithms import frame_store
from attn_policies.algorithms.bc import BatchSampler, BCConfig
from attn_policies.algorithms.bc_data import BCDataset, DatasetBuffer
from attn_policies.algorithms.frame_store import FrameStore, StackedFrames


def stacked_steps(
    rng: np.random.Generator, n_envs: int, steps: int, k: int, n: int = 5, p: int = 3
) -> tuple[np.ndarray, int]:
    """Tokens ``(steps * n_envs, n, p * k)`` of interleaved envs (sample order step-major,
    as a VecEnv records them) with random resets, each reset stacking the first screen k
    times as ``FrameStackObservation`` pads; and the number of distinct screens."""
    out = np.empty((steps, n_envs, n, p * k), np.uint8)
    distinct = 0
    for e in range(n_envs):
        window: list[np.ndarray] = []
        for t in range(steps):
            screen = rng.integers(0, 256, (n, p), dtype=np.uint8)
            distinct += 1
            reset = not window or rng.random() < 0.1
            window = [screen] * k if reset else [*window[1:], screen]
            out[t, e] = np.stack(window, -1).reshape(n, p * k)  # the frame innermost
    return out.reshape(steps * n_envs, n, p * k), distinct


def test_round_trip_keeps_each_distinct_frame_once() -> None:
    tokens, distinct = stacked_steps(np.random.default_rng(0), n_envs=3, steps=40, k=4)
    store = FrameStore(capacity=len(tokens) + 7, stack=4)
    store.append(tokens[:50])
    store.append(tokens[50:])  # appends continue: frames seen before are found again
    data = store.data()
    assert data.shape == tokens.shape and data.dtype == np.uint8 and len(data) == len(tokens)
    assert store.n_frames == distinct
    np.testing.assert_array_equal(np.asarray(data), tokens)
    rows = np.array([5, 0, 119, 5])
    np.testing.assert_array_equal(data[rows], tokens[rows])
    np.testing.assert_array_equal(data[3], tokens[3])
    np.testing.assert_array_equal(data[10:20], tokens[10:20])


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    k=st.integers(1, 4),
    batch=st.integers(1, 12),
    keep=st.integers(1, 5),
)
def test_take_and_take_tokens_equal_numpy_indexing(
    seed: int, k: int, batch: int, keep: int
) -> None:
    rng = np.random.default_rng(seed)
    tokens, _ = stacked_steps(rng, n_envs=2, steps=8, k=k)
    store = FrameStore(capacity=len(tokens), stack=k)
    store.append(tokens)
    data = store.data()
    rows = torch.as_tensor(rng.integers(0, len(tokens), batch))
    tokens_order = rng.permuted(np.tile(np.arange(5), (batch, 1)), axis=1)
    kept = torch.as_tensor(np.sort(tokens_order[:, :keep], axis=1))
    expected = torch.as_tensor(tokens[rows.numpy()])
    assert torch.equal(data.take(rows), expected)
    got = data.take_tokens(rows, kept)
    assert torch.equal(got, expected[torch.arange(batch)[:, None], kept])


def test_frames_with_one_digest_are_still_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    class Constant:  # every frame gets the same digest: only the bytes can separate them
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def digest(self) -> bytes:
            return b"0" * 16

    monkeypatch.setattr(frame_store.hashlib, "blake2b", Constant)
    tokens, distinct = stacked_steps(np.random.default_rng(1), n_envs=1, steps=6, k=2)
    store = FrameStore(capacity=len(tokens), stack=2)
    store.append(tokens)
    # the first frame is kept under the digest, the others under digest + bytes
    assert store.n_frames == distinct
    np.testing.assert_array_equal(np.asarray(store.data()), tokens)


def test_bad_input_is_refused() -> None:
    store = FrameStore(capacity=4, stack=4)
    with pytest.raises(ValueError, match="empty"):
        store.data()
    with pytest.raises(ValueError, match="frame innermost"):
        store.append(np.zeros((2, 3, 10), np.uint8))  # 10 is not a multiple of 4
    store.append(np.zeros((2, 3, 8), np.uint8))
    with pytest.raises(ValueError, match="unlike"):
        store.append(np.zeros((2, 3, 12), np.uint8))
    with pytest.raises(ValueError, match="unlike"):
        store.append(np.zeros((2, 3, 8), np.float32))
    with pytest.raises(ValueError, match="do not fit"):
        store.append(np.zeros((3, 3, 8), np.uint8))
    with pytest.raises(ValueError, match=">= 1"):
        FrameStore(capacity=0, stack=4)
    with pytest.raises(ValueError, match=r"\(F, N, P\)"):
        StackedFrames(np.zeros((2, 3)), np.zeros((1, 2), np.int64))
    with pytest.raises(ValueError, match="lie in"):
        StackedFrames(np.zeros((2, 3, 1)), np.full((1, 2), 2))


def _pong_like(rng: np.random.Generator) -> tuple[BCDataset, int]:
    tokens, distinct = stacked_steps(rng, n_envs=4, steps=25, k=4, n=20, p=3)
    prev = np.eye(3, dtype=np.float32)[rng.integers(0, 3, len(tokens))]
    logits = rng.normal(size=(len(tokens), 3)).astype(np.float32)
    actions = rng.integers(0, 3, len(tokens))
    return BCDataset({"observation": tokens, "prev_action": prev}, logits, actions), distinct


@pytest.mark.parametrize("occlusion", [0.0, 0.5, (0.1, 0.8)])
def test_a_stacked_buffer_gives_the_batches_of_the_plain_one(occlusion: object) -> None:
    data, distinct = _pong_like(np.random.default_rng(2))
    halves = [
        BCDataset({k: v[a:b] for k, v in data.obs.items()}, data.targets[a:b], data.actions[a:b])
        for a, b in ((0, 40), (40, len(data)))
    ]
    plain, stacked = DatasetBuffer(len(data)), DatasetBuffer(len(data), {"observation": 4})
    for part in halves:
        plain.append(part)
        stacked.append(part)
    assert isinstance(stacked.data.obs["observation"], StackedFrames)
    assert stacked._obs["observation"].n_frames == distinct < len(data) * 4
    config = BCConfig(batch_size=16, occlusion=occlusion, tokens_key="observation",
                      prev_action_noise=0.1)  # fmt: skip
    batches = []
    for buffer in (plain, stacked):
        sampler = BatchSampler(buffer.data, config)
        rng, g = np.random.default_rng(3), torch.Generator().manual_seed(3)
        batches.append([b for _ in range(2) for b in sampler.epoch(rng, g)])
    for (obs_a, t_a, a_a), (obs_b, t_b, a_b) in zip(*batches, strict=True):
        for key in obs_a:
            assert obs_a[key].dtype == obs_b[key].dtype and torch.equal(obs_a[key], obs_b[key])
        assert torch.equal(t_a, t_b) and torch.equal(a_a, a_b)


def test_a_stacked_buffer_refuses_what_it_cannot_store() -> None:
    data, _ = _pong_like(np.random.default_rng(4))
    with pytest.raises(ValueError, match="not among"):
        DatasetBuffer(len(data), {"screen": 4}).append(data)
    with pytest.raises(ValueError, match="not among"):
        DatasetBuffer(len(data), {"observation": 4}).append(
            BCDataset(data.obs["observation"], data.targets, data.actions)
        )


@pytest.mark.parametrize("kwargs", [{"shuffle": False}, {"shuffle": True, "reshuffle_every": 3}])
def test_puzzle_pong_tokens_are_stored_exactly_in_about_a_quarter(kwargs: dict) -> None:
    """Real Puzzle Pong steps: exact round trip; with a fixed order each step adds one frame
    (plus 3 at the reset), and reshuffles only add frames, never corrupt them."""
    env = gym.make("attn_envs/PuzzlePong-v0", **kwargs)
    obs, _ = env.reset(seed=0)
    steps = [obs]
    for t in range(11):
        obs, *_ = env.step(t % 6)
        steps.append(obs)
    env.close()
    tokens = np.stack(steps)
    store = FrameStore(capacity=len(tokens), stack=4)
    store.append(tokens)
    np.testing.assert_array_equal(np.asarray(store.data()), tokens)
    if not kwargs["shuffle"]:
        # the reset pads with its first screen; Pong's first screens may also repeat
        assert store.n_frames <= len(tokens)
    assert store.n_frames < 4 * len(tokens)
