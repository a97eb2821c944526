"""Tests for zoo.pretrained (importing the seed 001 authors' published agents).

No test reads the authors' files: each test writes a checkpoint folder in the authors'
layout itself (``config.gin`` + ``model.npz`` holding one flat vector), from the weights of
an independent numpy reference forward written here from the papers' equations, imports it
and checks that the imported run acts exactly like the reference.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo
from zoo.cli import main
from zoo.config import ConfigError
from zoo.pretrained import import_checkpoint

RNG_SEED = 0


# -- numpy reference forwards (the papers' equations) ---------------------------------------


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def positions(n: int, dim: int) -> np.ndarray:
    """Transformer sinusoids: sin(p / 10000^(2i/d)) in column 2i, cos in column 2i + 1."""
    p = np.arange(n)[:, None]
    i = np.arange(dim)[None, :]
    angle = p / np.power(10000.0, 2 * (i // 2) / dim)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


def lstm(w: dict[str, np.ndarray], x: np.ndarray, h: np.ndarray, c: np.ndarray):
    """One LSTM step with gates (input, forget, cell, output) stacked in that order."""
    gates = x @ w["w_ih"].T + w["b_ih"] + h @ w["w_hh"].T + w["b_hh"]
    i, f, g, o = np.split(gates, 4, axis=-1)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c), c


def lstm_weights(rng: np.random.Generator, n_in: int, hidden: int) -> dict[str, np.ndarray]:
    return {
        "w_ih": rng.normal(0, 0.5, (4 * hidden, n_in)),
        "w_hh": rng.normal(0, 0.5, (4 * hidden, hidden)),
        "b_ih": rng.normal(0, 0.5, 4 * hidden),
        "b_hh": rng.normal(0, 0.5, 4 * hidden),
    }


def layer_norm(x: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


class NeuronAgent:
    """AttentionNeuron agent (seed 001, E3/E4): per-input LSTM keys, fixed sinusoid queries,
    ``m_t = tanh(tanh(Q K^T / s) o_t)``, then tanh layers; feeds back its last action."""

    def __init__(self, rng, n_act, m, msg, pos, hidden_layers, bias, scale):
        self.n_act, self.m, self.pos, self.bias, self.scale = n_act, m, pos, bias, scale
        self.msg = msg
        self.lstm = lstm_weights(rng, 1 + n_act, pos)
        self.wq, self.bq = rng.normal(0, 0.5, (msg, pos)), rng.normal(0, 0.5, msg)
        self.wk, self.bk = rng.normal(0, 0.5, (msg, pos)), rng.normal(0, 0.5, msg)
        self.fc = [
            (rng.normal(0, 0.5, (m, m)), rng.normal(0, 0.5, m)) for _ in range(hidden_layers)
        ]
        self.out = (rng.normal(0, 0.5, (n_act, m)), rng.normal(0, 0.5, n_act))
        self.reset()

    def reset(self) -> None:
        self.h = self.c = None
        self.prev = np.zeros(self.n_act)

    def flat(self) -> np.ndarray:
        """The authors' layout: LSTM (w_ih, w_hh, b_ih, b_hh), W_q (+b), W_k (+b), FC layers."""
        parts = [self.lstm[k] for k in ("w_ih", "w_hh", "b_ih", "b_hh")]
        parts += [self.wq] + ([self.bq] if self.bias else []) + [self.wk]
        parts += [self.bk] if self.bias else []
        for w, b in [*self.fc, self.out]:
            parts += [w, b]
        return np.concatenate([p.ravel() for p in parts])

    def act(self, obs: np.ndarray) -> np.ndarray:
        n = len(obs)
        if self.h is None:
            self.h, self.c = np.zeros((n, self.pos)), np.zeros((n, self.pos))
        x = np.concatenate([obs[:, None], np.repeat(self.prev[None], n, 0)], 1)
        self.h, self.c = lstm(self.lstm, x, self.h, self.c)
        q = positions(self.m, self.pos) @ self.wq.T + (self.bq if self.bias else 0)
        k = self.h @ self.wk.T + (self.bk if self.bias else 0)
        scores = q @ k.T / (math.sqrt(self.msg) if self.scale else 1.0)
        x = np.tanh(np.tanh(scores) @ obs)
        for w, b in self.fc:
            x = np.tanh(w @ x + b)
        self.prev = np.tanh(self.out[0] @ x + self.out[1])
        return self.prev


class MLPAgent:
    def __init__(self, rng, n_obs, n_act, hidden, hidden_layers):
        sizes = [n_obs] + [hidden] * (hidden_layers + 1) + [n_act]
        self.layers = [
            (rng.normal(0, 0.5, (b, a)), rng.normal(0, 0.5, b))
            for a, b in itertools.pairwise(sizes)
        ]

    def flat(self) -> np.ndarray:
        return np.concatenate([p.ravel() for layer in self.layers for p in layer])

    def reset(self) -> None:
        pass

    def act(self, obs: np.ndarray) -> np.ndarray:
        x = obs
        for w, b in self.layers:
            x = np.tanh(w @ x + b)
        return x


def vote(x: np.ndarray, wq, bq, wk, bk, scale: float, centres: np.ndarray, top_k: int):
    """Self-attention voting: softmax rows of (X W_q)(X W_k)^T * scale, column sums, top K."""
    scores = (x @ wq.T + bq) @ (x @ wk.T + bk).T * scale
    attention = np.exp(scores - scores.max(1, keepdims=True))
    attention /= attention.sum(1, keepdims=True)
    winners = np.argsort(-attention.sum(0), kind="stable")[:top_k]
    return centres[winners].ravel()


class VotingAgent:
    """AttentionAgent (Tang et al. 2020): 7x7 patches at stride 4 of the 96x96 RGB screen,
    top-10 voted patch centres / 96 into an LSTM(16), tanh output. ``layout`` 2021 (the
    AttentionNeuron repository) or 2020 (per layer, state_dict keys sorted)."""

    def __init__(self, rng, layout: str):
        self.layout = layout
        d = 147
        self.wq, self.bq = rng.normal(0, 0.1, (4, d)), rng.normal(0, 0.1, 4)
        self.wk, self.bk = rng.normal(0, 0.1, (4, d)), rng.normal(0, 0.1, 4)
        self.lstm = lstm_weights(rng, 20, 16)
        self.out = (rng.normal(0, 0.5, (3, 16)), rng.normal(0, 0.5, 3))
        self.scale = 1 / math.sqrt(d) if layout == "2020" else 1 / math.sqrt(4)
        grid = 3 + 4 * np.arange(23)
        self.centres = np.stack(np.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2) / 96
        self.reset()

    def reset(self) -> None:
        self.h, self.c = np.zeros(16), np.zeros(16)

    def flat(self) -> np.ndarray:
        w = self.lstm
        if self.layout == "2021":
            parts = [self.wq, self.bq, self.wk, self.bk, w["w_ih"], w["w_hh"], w["b_ih"]]
            parts += [w["b_hh"], *self.out]
        else:  # sorted keys: bias < weight; bias_hh < bias_ih < weight_hh < weight_ih
            parts = [self.bq, self.wq, self.bk, self.wk, w["b_hh"], w["b_ih"], w["w_hh"]]
            parts += [w["w_ih"], self.out[1], self.out[0]]
        return np.concatenate([p.ravel() for p in parts])

    def act(self, frame: np.ndarray) -> np.ndarray:
        x = frame / 255.0
        patches = np.stack(
            [x[4 * i : 4 * i + 7, 4 * j : 4 * j + 7].ravel() for i in range(23) for j in range(23)]
        )  # each (row, col, channel)
        centres = vote(patches, self.wq, self.bq, self.wk, self.bk, self.scale, self.centres, 10)
        self.h, self.c = lstm(self.lstm, centres, self.h, self.c)
        return np.tanh(self.out[0] @ self.h + self.out[1])


class NeuronVotingAgent:
    """E6 (seed 001): AttentionNeuron over 256 6x6 patches of a 4-frame grey stack (keys:
    frame differences, pixel-major, + a_{t-1}; values: per-frame layer-normed patch), 1024
    sinusoid queries, LN(relu(A V)) -> 32x32x16 codes, smoothed by alpha, voting top 10
    cells / 32 -> LSTM(16) -> tanh; alpha = sigmoid(FC(tanh(FC([h, a]))))."""

    def __init__(self, rng):
        self.wq, self.bq = rng.normal(0, 0.5, (16, 8)), rng.normal(0, 0.5, 16)
        self.wk, self.bk = rng.normal(0, 0.2, (16, 111)), rng.normal(0, 0.2, 16)
        self.wv, self.bv = rng.normal(0, 0.2, (16, 144)), rng.normal(0, 0.2, 16)
        self.vq, self.cq = rng.normal(0, 0.5, (4, 16)), rng.normal(0, 0.5, 4)
        self.vk, self.ck = rng.normal(0, 0.5, (4, 16)), rng.normal(0, 0.5, 4)
        self.lstm = lstm_weights(rng, 20, 16)
        self.out = (rng.normal(0, 0.5, (3, 16)), rng.normal(0, 0.5, 3))
        self.g1 = (rng.normal(0, 0.5, (16, 19)), rng.normal(0, 0.5, 16))
        self.g2 = (rng.normal(0, 0.5, (1, 16)), rng.normal(0, 0.5, 1))
        grid = np.arange(32)
        self.centres = np.stack(np.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2) / 32
        self.reset()

    def reset(self) -> None:
        self.h, self.c = np.zeros(16), np.zeros(16)
        self.prev, self.m_prev, self.alpha = np.zeros(3), np.zeros((1024, 16)), 0.0

    def flat(self) -> np.ndarray:
        w = self.lstm
        parts = [self.wq, self.bq, self.wk, self.bk, self.wv, self.bv]
        parts += [self.vq, self.cq, self.vk, self.ck]
        parts += [w["w_ih"], w["w_hh"], w["b_ih"], w["b_hh"], *self.out, *self.g1, *self.g2]
        return np.concatenate([p.ravel() for p in parts])

    def act(self, stack: np.ndarray) -> np.ndarray:
        x = stack / 255.0  # (4, 96, 96), oldest frame first
        cells = x.reshape(4, 16, 6, 16, 6).transpose(1, 3, 2, 4, 0).reshape(256, 36, 4)
        diffs = np.diff(cells, axis=-1).reshape(256, 108)  # pixel-major: pix * 3 + d
        keys = np.concatenate([diffs, np.repeat(self.prev[None], 256, 0)], 1) @ self.wk.T
        values = layer_norm(cells.transpose(0, 2, 1)).reshape(256, 144) @ self.wv.T + self.bv
        q = positions(1024, 8) @ self.wq.T + self.bq
        scores = q @ (keys + self.bk).T / 4.0
        a = np.exp(scores - scores.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        m = layer_norm(np.maximum(a @ values, 0))
        m = (1 - self.alpha) * m + self.alpha * self.m_prev
        self.m_prev = m
        centres = vote(m, self.vq, self.cq, self.vk, self.ck, 1.0, self.centres, 10)
        self.h, self.c = lstm(self.lstm, centres, self.h, self.c)
        self.prev = np.tanh(self.out[0] @ self.h + self.out[1])
        hidden = np.tanh(self.g1[0] @ np.concatenate([self.h, self.prev]) + self.g1[1])
        self.alpha = float(sigmoid(self.g2[0] @ hidden + self.g2[1])[0])
        return self.prev


# -- checkpoint folders in the authors' layout -----------------------------------------------

GIN = {
    "cartpole_pi": """import util
import solutions.torch_solutions
torch_solutions.PIFCSolution.act_dim = 1
torch_solutions.PIFCSolution.hidden_dim = 16
torch_solutions.PIFCSolution.msg_dim = 32
torch_solutions.PIFCSolution.pos_em_dim = 8
torch_solutions.PIFCSolution.num_hidden_layers = 0
torch_solutions.PIFCSolution.pi_layer_bias = False
torch_solutions.PIFCSolution.pi_layer_scale = False
util.create_solution.solution_loader = @torch_solutions.PIFCSolution
rl_tasks.CartPoleSwingUpTask.num_noise_channels = 5
rl_tasks.CartPoleSwingUpTask.shuffle_on_reset = True
util.create_task.task_loader = @rl_tasks.CartPoleSwingUpTask()
""",
    "ant_pi": """torch_solutions.PIFCSolution.act_dim = 8
torch_solutions.PIFCSolution.hidden_dim = 32
torch_solutions.PIFCSolution.msg_dim = 32
torch_solutions.PIFCSolution.pos_em_dim = 8
util.create_solution.solution_loader = @torch_solutions.PIFCSolution
rl_tasks.PyBulletTask.env_name = "AntBulletEnv-v0"
rl_tasks.PyBulletTask.shuffle_on_reset = True
util.create_task.task_loader = @rl_tasks.PyBulletTask()
""",
    "ant_mlp": """torch_solutions.MLPSolution.obs_dim = 28
torch_solutions.MLPSolution.act_dim = 8
torch_solutions.MLPSolution.hidden_dim = 32
torch_solutions.MLPSolution.num_hidden_layers = 1
util.create_solution.solution_loader = @torch_solutions.MLPSolution
rl_tasks.PyBulletTask.env_name = "AntBulletEnv-v0"
rl_tasks.PyBulletTask.shuffle_on_reset = False
util.create_task.task_loader = @rl_tasks.PyBulletTask()
""",
    "carracing": """torch_solutions.AttentionAgent.image_size = 96
torch_solutions.AttentionAgent.query_dim = 4
torch_solutions.AttentionAgent.patch_size = 7
torch_solutions.AttentionAgent.patch_stride = 4
torch_solutions.AttentionAgent.hidden_dim = 16
torch_solutions.AttentionAgent.top_k = 10
util.create_solution.solution_loader = @torch_solutions.AttentionAgent
rl_tasks.CarRacingTask.bkg = None
rl_tasks.CarRacingTask.permute_obs = False
rl_tasks.CarRacingTask.stack_k_frames = 0
util.create_task.task_loader = @rl_tasks.CarRacingTask()
""",
    "carracing_pi": """torch_solutions.PIAttentionAgent.act_dim = 3
torch_solutions.PIAttentionAgent.msg_dim = 16
torch_solutions.PIAttentionAgent.pos_em_dim = 8
torch_solutions.PIAttentionAgent.patch_size = 6
torch_solutions.PIAttentionAgent.stack_k = 4
torch_solutions.PIAttentionAgent.aa_image_size = 32
torch_solutions.PIAttentionAgent.aa_query_dim = 4
torch_solutions.PIAttentionAgent.aa_hidden_dim = 16
torch_solutions.PIAttentionAgent.aa_top_k = 10
util.create_solution.solution_loader = @torch_solutions.PIAttentionAgent
rl_tasks.CarRacingTask.bkg = None
rl_tasks.CarRacingTask.permute_obs = True
rl_tasks.CarRacingTask.patch_size = 6
rl_tasks.CarRacingTask.stack_k_frames = 4
util.create_task.task_loader = @rl_tasks.CarRacingTask()
""",
    "CarRacing": """import algorithms.cma
cma.CMA.population_size = 256
torch_solutions.VisionTaskSolution.image_size = 96
torch_solutions.VisionTaskSolution.query_dim = 4
torch_solutions.VisionTaskSolution.output_dim = 3
torch_solutions.VisionTaskSolution.output_activation = "tanh"
torch_solutions.VisionTaskSolution.num_hiddens = [16,]
torch_solutions.VisionTaskSolution.patch_size = 7
torch_solutions.VisionTaskSolution.patch_stride = 4
torch_solutions.VisionTaskSolution.top_k = 10
torch_solutions.VisionTaskSolution.data_dim = 3
torch_solutions.VisionTaskSolution.activation = "tanh"
torch_solutions.VisionTaskSolution.normalize_positions = True
torch_solutions.VisionTaskSolution.use_lstm_controller = True
utility.create_solution.solution_loader = @torch_solutions.VisionTaskSolution()
utility.create_task.modification = "original"
utility.create_task.out_of_track_cap = 20
utility.create_task.task_loader = @gym_task.CarRacingTask()
""",
}


def reference(name: str, rng: np.random.Generator):
    if name == "cartpole_pi":
        return NeuronAgent(rng, 1, 16, 32, 8, 0, bias=False, scale=False)
    if name == "ant_pi":
        return NeuronAgent(rng, 8, 32, 32, 8, 1, bias=True, scale=True)
    if name == "ant_mlp":
        return MLPAgent(rng, 28, 8, 32, 1)
    if name == "carracing":
        return VotingAgent(rng, "2021")
    if name == "CarRacing":
        return VotingAgent(rng, "2020")
    return NeuronVotingAgent(rng)


def write_folder(folder: Path, name: str, params: np.ndarray, log: str | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.gin").write_text(GIN[name])
    np.savez(folder / "model.npz", params=params)
    if log:
        (folder / "test_log.txt").write_text(log)
    return folder


def ours(policy: torch.nn.Module, name: str, obs: np.ndarray, state):
    """One step of the imported policy on the observation our env gives for ``obs``."""
    if name == "carracing_pi":  # (4, 96, 96) stack -> 6x6 patch tokens, (row, col, frame)
        tokens = obs.reshape(4, 16, 6, 16, 6).transpose(1, 3, 2, 4, 0).reshape(256, 144)
        x = torch.as_tensor(tokens[None].astype(np.uint8))
    elif name in ("carracing", "CarRacing"):
        x = torch.as_tensor(obs[None].astype(np.uint8))
    else:
        x = torch.as_tensor(obs[None], dtype=torch.float32)
    with torch.no_grad():
        action, state = policy(x, state)
    return action[0].numpy().astype(np.float64), state


def observation(name: str, rng: np.random.Generator) -> np.ndarray:
    if name == "cartpole_pi":
        return rng.normal(size=5)
    if name in ("ant_pi", "ant_mlp"):
        return rng.normal(size=28)
    if name == "carracing_pi":
        return rng.integers(0, 256, (4, 96, 96)).astype(np.float64)
    return rng.integers(0, 256, (96, 96, 3)).astype(np.float64)


@pytest.mark.parametrize(
    "name", ["cartpole_pi", "ant_pi", "ant_mlp", "carracing", "carracing_pi", "CarRacing"]
)
def test_import_acts_like_the_reference(tmp_path, name):
    rng = np.random.default_rng(RNG_SEED)
    agent = reference(name, rng)
    log = "x Episode: 1, reward: 10.5\nx Episode: 2, reward: 12.5\nx Avg reward: 11.50, sd: 1.00\n"
    source = write_folder(tmp_path / name, name, agent.flat(), log)
    run = import_checkpoint(source, out=tmp_path / "run")
    loaded = zoo.load(run.path)
    policy = loaded.model()
    state = None
    for _ in range(4):  # recurrent state and a_{t-1} carried over steps
        obs = observation(name, rng)
        expected = agent.act(obs)
        got, state = ours(policy, name, obs, state)
        np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)
    provenance = json.loads((run.path / "provenance.json").read_text())
    assert provenance["authors_logs"]["test_log.txt"] == {
        "mean": 11.5,
        "std": 1.0,
        "n_episodes": 2,
    }
    assert len(provenance["sha256"]["model.npz"]) == 64
    assert loaded.status["state"] == "finished"


def test_cartpole_pi_run_evaluates_and_matches_reference_episode(tmp_path):
    """The imported run plays its env like the reference does (same actions, same return)."""
    import gymnasium as gym

    import attn_envs  # noqa: F401

    agent = reference("cartpole_pi", np.random.default_rng(1))
    run = import_checkpoint(
        write_folder(tmp_path / "c", "cartpole_pi", agent.flat()), tmp_path / "r"
    )
    env = gym.make("attn_envs/CartPoleSwingUpHarder-v0")
    seed = run.config.eval.test_seed
    obs, _ = env.reset(seed=seed)
    total, done, steps = 0.0, False, 0
    while not done and steps < 200:
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs).astype(np.float32))
        total, done, steps = total + reward, terminated or truncated, steps + 1
    if not done:
        pytest.skip("reference episode too long for a unit test")
    result = zoo.evaluate(run.path, n_episodes=1)
    assert result["policies"]["deterministic"]["mean_reward"] == pytest.approx(total, rel=1e-4)


def test_carracing_pi_key_columns_are_permuted(tmp_path):
    """Without the pixel-major -> frame-major permutation the key weights would differ."""
    agent = reference("carracing_pi", np.random.default_rng(2))
    run = import_checkpoint(
        write_folder(tmp_path / "c", "carracing_pi", agent.flat()), tmp_path / "r"
    )
    key = zoo.load(run.path).model().neuron.key_proj.weight.detach().numpy()
    d, pix = 1, 5
    np.testing.assert_allclose(key[:, d * 36 + pix], agent.wk[:, pix * 3 + d], rtol=1e-6)
    np.testing.assert_allclose(key[:, 108:], agent.wk[:, 108:], rtol=1e-6)


def test_config_names_our_envs_and_settings(tmp_path):
    for name, env in [
        ("carracing_pi", "attn_envs/PuzzleCarRacing-v0"),
        ("CarRacing", "attn_envs/ClassicCarRacing-v0"),
        ("ant_mlp", "pybullet_envs_gymnasium:AntBulletEnv-v0"),
    ]:
        agent = reference(name, np.random.default_rng(0))
        run = import_checkpoint(
            write_folder(tmp_path / name, name, agent.flat()), tmp_path / f"r{name}"
        )
        body = zoo.load(run.path).config.body
        assert body["env"] == env
        if name == "carracing_pi":
            assert body["env_kwargs"] == {"screen": "classic"}
        if name == "CarRacing":
            assert body["policy_kwargs"]["scale"] == pytest.approx(1 / math.sqrt(147))


# -- bad input: one clear error, nothing written ---------------------------------------------


def _cartpole_folder(tmp_path: Path) -> Path:
    agent = reference("cartpole_pi", np.random.default_rng(0))
    return write_folder(tmp_path / "src", "cartpole_pi", agent.flat())


@pytest.mark.parametrize(
    "break_it, message",
    [
        (lambda f: (f / "model.npz").unlink(), "lacks model.npz"),
        (lambda f: (f / "config.gin").unlink(), "lacks config.gin"),
        (
            lambda f: (f / "config.gin").write_text(
                GIN["cartpole_pi"].replace("PIFCSolution", "WeirdSolution")
            ),
            "unknown solution class 'WeirdSolution'",
        ),
        (
            lambda f: (f / "config.gin").write_text(
                GIN["cartpole_pi"].replace("CartPoleSwingUpTask", "MazeTask")
            ),
            "MazeTask is not supported",
        ),
        (lambda f: np.savez(f / "model.npz", params=np.zeros(912)), "912 parameters"),
        (lambda f: np.savez(f / "model.npz", weights=np.zeros(913)), "no 'params'"),
        (lambda f: (f / "model.npz").write_bytes(b"not a zip"), "not a plain numpy .npz"),
        (
            lambda f: (
                np.save(f / "model.npz.npy", np.zeros(3))
                or (f / "model.npz.npy").rename(f / "model.npz")
            ),
            "not an .npz archive",
        ),
        (
            lambda f: np.savez(f / "model.npz", params=np.array([{"a": 1}], dtype=object)),
            "not a plain numeric array",
        ),
        (lambda f: (f / "config.gin").write_text("x.y = __import__('os')\n"), "not a literal"),
    ],
)
def test_bad_input_is_one_clear_error_and_writes_nothing(tmp_path, break_it, message):
    source = _cartpole_folder(tmp_path)
    break_it(source)
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=message):
        import_checkpoint(source, out=out)
    assert not out.exists()


def test_object_array_is_never_unpickled(tmp_path, monkeypatch):
    import pickle

    source = _cartpole_folder(tmp_path)
    np.savez(source / "model.npz", params=np.array([{"a": 1}], dtype=object))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    with pytest.raises(ConfigError):
        import_checkpoint(source, out=tmp_path / "run")


def test_existing_run_folder_is_not_overwritten(tmp_path):
    source = _cartpole_folder(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not empty"):
        import_checkpoint(source, out=out)
    assert (out / "keep.txt").read_text() == "mine"


def test_cli_import_then_evaluate(tmp_path, capsys):
    source = _cartpole_folder(tmp_path)
    out = tmp_path / "run"
    assert main(["import", str(source), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert main(["evaluate", str(out), "--episodes", "2"]) == 0
    assert "deterministic return" in capsys.readouterr().out


def test_committed_run_without_weights_says_how_to_get_them(tmp_path, capsys):
    # results/pretrained/* keep config and provenance, not the authors' weights
    out = tmp_path / "run"
    import_checkpoint(_cartpole_folder(tmp_path), out=out)
    (out / "model.pt").unlink()
    assert main(["evaluate", str(out), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"`attn-zoo import SOURCE --restore {out}`" in err


def test_restore_writes_back_the_same_weights_and_nothing_else(tmp_path, capsys):
    source = _cartpole_folder(tmp_path)
    out = tmp_path / "run"
    import_checkpoint(source, out=out)
    imported = torch.load(out / "model.pt", weights_only=True)
    (out / "model.pt").unlink()
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    assert main(["import", str(source), "--restore", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "model.pt")
    restored = torch.load(out / "model.pt", weights_only=True)
    assert restored.keys() == imported.keys()
    assert all(torch.equal(restored[k], imported[k]) for k in imported)
    assert {f.name: f.read_bytes() for f in out.iterdir() if f.name != "model.pt"} == before
    assert main(["evaluate", str(out), "--episodes", "1"]) == 0


def test_restore_refuses_other_files_or_a_folder_with_weights(tmp_path, capsys):
    source = _cartpole_folder(tmp_path)
    out = tmp_path / "run"
    import_checkpoint(source, out=out)
    assert main(["import", str(source), "--restore", str(out)]) == 2
    assert "already holds model.pt" in capsys.readouterr().err
    (out / "model.pt").unlink()
    other = write_folder(
        tmp_path / "other", "cartpole_pi", reference("cartpole_pi", np.random.default_rng(1)).flat()
    )
    assert main(["import", str(other), "--restore", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not the ones" in err and "sha256" in err
    assert not (out / "model.pt").exists()
    assert main(["import", str(source), "--restore", str(tmp_path / "src")]) == 2
    assert "has no provenance.json" in capsys.readouterr().err
    assert main(["import", str(source), "--restore", str(out), "--out", str(out)]) == 2
    assert not (out / "model.pt").exists()


def test_cli_bad_input_exit_2_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["import", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a folder" in err
    assert not out.exists()


def test_ant_run_evaluates_and_takes_sweeps(tmp_path):
    """The run names its env as ``module:EnvId``; evaluation and sweeps import the module."""
    pytest.importorskip("pybullet_envs_gymnasium")
    from zoo.robustness import check_sweep

    agent = reference("ant_mlp", np.random.default_rng(0))
    src = write_folder(tmp_path / "c", "ant_mlp", agent.flat())
    run = import_checkpoint(src, tmp_path / "r")
    check_sweep([run.path], "shuffle", True)
    result = zoo.evaluate(run.path, n_episodes=1)
    assert np.isfinite(result["policies"]["deterministic"]["mean_reward"])


# -- issue 46: values of a stranger's gin file and model.npz (items 8 and 11) --------------


@pytest.mark.parametrize("value", ["1000000000", "1e400", "0", "'wide'", "True"])
def test_a_bad_gin_value_names_the_file_and_the_key(tmp_path: Path, value: str) -> None:
    source = _cartpole_folder(tmp_path)
    gin = GIN["cartpole_pi"].replace("hidden_dim = 16", f"hidden_dim = {value}")
    (source / "config.gin").write_text(gin)
    out = tmp_path / "run"
    where = rf"{source / 'config.gin'}: PIFCSolution\.hidden_dim = .* must be an integer"
    with pytest.raises(ConfigError, match=where):
        import_checkpoint(source, out=out)
    assert not out.exists()


def npz_bomb(path: Path, n: int) -> None:
    """A compressed ``model.npz`` whose ``params`` are ``n`` float64 zeros (240 MB for
    30M, a few hundred kB on disk), written without holding the array in memory."""
    import zipfile

    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("params.npy", "w", force_zip64=True) as fh,
    ):
        header = {"descr": "<f8", "fortran_order": False, "shape": (n,)}
        np.lib.format.write_array_header_1_0(fh, header)
        chunk = bytes(8 * 2**20)
        for _ in range(n * 8 // len(chunk)):
            fh.write(chunk)


def test_an_npz_bomb_is_refused_from_its_header_before_decompressing(tmp_path: Path) -> None:
    import tracemalloc

    source = _cartpole_folder(tmp_path)
    npz_bomb(source / "model.npz", 30 * 2**20)
    assert (source / "model.npz").stat().st_size < 2**20
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=f"{30 * 2**20} parameters, but"):
        import_checkpoint(source, out=out)  # first: the modules it imports are loaded
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=f"{30 * 2**20} parameters, but"):
            import_checkpoint(source, out=out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20  # 240 MB were decompressed before the count was compared
    assert not out.exists()


def test_a_full_disk_during_import_is_one_line_and_leaves_no_folder(tmp_path):
    """Issue 68: ``attn-zoo import`` under a file-size limit (config.yml fits, model.pt does
    not) is one ``attn-zoo: error:`` line, exit 2, and no half folder (which the same command
    would then refuse as not empty); the same command without the limit then succeeds."""
    import resource
    import signal
    import subprocess
    import sys

    params = np.random.default_rng(0).normal(size=913) * 0.1
    source = write_folder(tmp_path / "src", "cartpole_pi", params)
    out = tmp_path / "imported"
    argv = [sys.executable, "-m", "zoo.cli", "import", str(source), "--out", str(out)]

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    cut = subprocess.run(argv, capture_output=True, text=True, preexec_fn=limit, check=False)
    lines = cut.stderr.strip().splitlines()
    assert cut.returncode == 2 and len(lines) == 1, cut.stderr
    assert lines[0].startswith("attn-zoo: error: no room") and "File too large" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert subprocess.run(argv, capture_output=True, check=False).returncode == 0
    assert json.loads((out / "status.json").read_text())["state"] == "finished"


def test_a_sigterm_inside_import_removes_its_half_written_folder(tmp_path):
    """Issue 68: SIGTERM acts as Ctrl-C for every command, not only train: an import stopped
    while it writes (here: the signal arrives as it saves the model) exits 130 and leaves
    neither the folder nor its hidden temporary folder; before, SIGTERM killed the process
    mid-write and the temporary folder stayed."""
    import subprocess
    import sys

    params = np.random.default_rng(0).normal(size=913) * 0.1
    source = write_folder(tmp_path / "src", "cartpole_pi", params)
    out = tmp_path / "imported"
    code = (
        "import os, signal, sys, torch\n"
        "save = torch.save\n"
        "def stopped(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return save(*a, **k)\n"
        "torch.save = stopped\n"
        "from zoo.cli import main\n"
        f"sys.exit(main(['import', {str(source)!r}, '--out', {str(out)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    assert "interrupted" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no folder, no .tmp
