"""AtariARI-style annotated-RAM features with distractor games (seed 002, the d-AWRL thesis, E7).

``RAM_ANNOTATIONS`` (:mod:`attn_envs.ram_annotations`) names the bytes of
the 128-byte Atari RAM that hold the game's state variables (positions, scores, lives).
``RamFeatureObservation`` turns an ALE env's observation into those bytes.
``DistractorFeatureObservation`` builds the thesis's noisy inputs: the features of the played
game plus those of ``k`` uncontrolled copies of the same game, shuffled once and stacked over
time (conditions L, 2L, 4L are ``k`` = 0, 1, 3). The
thesis draws the feature order once per training run: pass ``order_seed`` (the zoo's
``atariari`` config sets it to the run seed) and every actor, evaluation env and replay of the
run sees the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat, TypeVar

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from attn_envs._seeding import SeededWrapperMixin, derive_rng
from attn_envs._spaces import require_integral
from attn_envs.atari_frames import NoopFrameReset
from attn_envs.ram_annotations import (
    RAM_SIZE,
    feature_indices,
    game_from_env_id,
    resolve_game,
)

__all__ = [
    "DistractorFeatureObservation",
    "RamFeatureEntryObservation",
    "RamFeatureObservation",
    "make_distractor_env",
    "make_ram_feature_env",
]

gym.register_envs(ale_py)


def _require_ale(env: gym.Env, wrapper: str) -> Any:
    """The ``AtariEnv`` under ``env``; TypeError unless the env is an ALE env."""
    base = env.unwrapped
    if not hasattr(base, "ale"):
        raise TypeError(
            f"{wrapper} needs an ALE env (env.unwrapped with an `.ale` ALEInterface), "
            f"got {type(base).__name__}"
        )
    return base


def _infer_game(env: gym.Env, wrapper: str) -> str:
    # The emulator's own ROM id is authoritative; gym.make overwrites unwrapped.spec with the
    # outer registration's id (e.g. a factory registered as "attn/DistractorPong-v0").
    rom = getattr(env.unwrapped, "_ezpickle_kwargs", {}).get("game")
    if rom is not None:
        return resolve_game(rom)
    spec = env.spec or env.unwrapped.spec
    if spec is None:
        raise ValueError(f"{wrapper} cannot infer the game of an env without a spec; pass game=")
    return resolve_game(game_from_env_id(spec.id))


class RamFeatureObservation(
    gym.ObservationWrapper[np.ndarray, Any, Any], gym.utils.RecordConstructorArgs
):
    """Replace an ALE observation by the annotated RAM bytes of the game (AtariARI features).

    The bytes are read from the emulator, so the inner ``obs_type`` does not matter;
    ``obs_type="ram"`` is the cheapest. ``feature_names[i]`` names ``obs[i]``.

    Args:
        env: An ALE env (``env.unwrapped.ale`` exists).
        game: Game name (see ``RAM_ANNOTATIONS``); ``None`` infers it from the env.
        dtype: Observation dtype; must hold every value 0..255.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs.atari_ram import RamFeatureObservation
        >>> env = RamFeatureObservation(gym.make("ALE/Pong-v5", obs_type="ram"))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype, env.feature_names[:3]
        ((8,), dtype('float32'), ['player_y', 'player_x', 'enemy_y'])
    """

    def __init__(
        self, env: gym.Env, game: str | None = None, dtype: type | np.dtype = np.float32
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, game=game, dtype=dtype)
        gym.ObservationWrapper.__init__(self, env)
        self._ale = _require_ale(env, "RamFeatureObservation").ale
        self.game = (
            resolve_game(game) if game is not None else _infer_game(env, type(self).__name__)
        )
        self.dtype = np.dtype(dtype)
        if not np.can_cast(np.uint8, self.dtype):
            raise ValueError(
                f"RamFeatureObservation needs a dtype that holds 0..255, got {self.dtype}"
            )
        self.feature_names, self._indices = feature_indices(self.game)
        self._ram = np.empty(RAM_SIZE, dtype=np.uint8)
        self.observation_space = spaces.Box(0, 255, (len(self._indices),), dtype=self.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        self._ale.getRAM(self._ram)
        return self._ram.take(self._indices).astype(self.dtype)


DistractorPolicy = str | Callable[[np.ndarray], int]


_ObsT = TypeVar("_ObsT")


class _DistractorFeatures(
    SeededWrapperMixin, gym.Wrapper[_ObsT, Any, Any, Any], gym.utils.RecordConstructorArgs
):
    """What :class:`DistractorFeatureObservation` and :class:`RamFeatureEntryObservation`
    share: the emulators, the feature order and the stack (``feature_space``); each says what
    its observation is (``_ObsT``)."""

    def __init__(
        self,
        env: gym.Env | str,
        n_distractors: int,
        stack: int = 4,
        distractor_policy: DistractorPolicy = "random",
        game: str | None = None,
        order_seed: int | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            n_distractors=n_distractors,
            stack=stack,
            distractor_policy=distractor_policy,
            game=game,
            order_seed=order_seed,
        )
        name = type(self).__name__
        n_distractors = require_integral(n_distractors, "n_distractors", minimum=0)
        stack = require_integral(stack, "stack")
        if order_seed is not None:
            order_seed = require_integral(order_seed, "order_seed", minimum=0)
        if not (callable(distractor_policy) or distractor_policy in ("random", "noop")):
            raise ValueError(
                "distractor_policy must be 'random', 'noop' or a callable, "
                f"got {distractor_policy!r}"
            )
        if isinstance(env, str):
            env = gym.make(env, obs_type="ram")
        gym.Wrapper.__init__(self, env)
        base = _require_ale(env, name)
        ale_kwargs = getattr(base, "_ezpickle_kwargs", None)
        if ale_kwargs is None or "game" not in ale_kwargs:
            raise TypeError(f"{name} needs an ale_py AtariEnv, got {type(base).__name__}")

        self.game = resolve_game(game) if game is not None else _infer_game(env, name)
        self.n_distractors, self.stack = n_distractors, stack
        self.distractor_policy = distractor_policy
        names, indices = feature_indices(self.game)
        self.n_features = len(names) * (self.n_distractors + 1)
        self.unshuffled_feature_names = [f"player/{n}" for n in names] + [
            f"distractor{j}/{n}" for j in range(1, self.n_distractors + 1) for n in names
        ]

        # Same constructor arguments as the played emulator, minus rendering and sound; RAM
        # observations are the cheapest to produce.
        distractor_kwargs = {
            **ale_kwargs,
            "obs_type": "ram",
            "render_mode": None,
            "sound_obs": False,
        }
        self._distractors = [
            ale_py.AtariEnv(**distractor_kwargs) for _ in range(self.n_distractors)
        ]
        self._ales = [base.ale] + [d.ale for d in self._distractors]
        self._n_actions = int(self._distractors[0].action_space.n) if self._distractors else 0

        # RAM of all emulators, one row each; a feature is one flat index into it.
        self._ram = np.zeros((self.n_distractors + 1, RAM_SIZE), dtype=np.uint8)
        self._ram_flat = self._ram.reshape(-1)
        self._ram_rows = list(self._ram)
        self._indices = indices
        self._unshuffled_flat = (
            np.arange(self.n_distractors + 1)[:, None] * RAM_SIZE + indices[None, :]
        ).ravel()
        self.order_seed = order_seed
        self._fixed_perm = (
            None
            if order_seed is None
            else derive_rng(order_seed, f"{self._salt}.order").permutation(self.n_features)
        )
        self._started = False
        self._set_permutation(self._fixed_perm)
        # Each frame is written twice, so ring[pos + 1 : pos + 1 + stack] is the stack in order.
        self._ring = np.zeros((2 * self.stack, self.n_features), dtype=np.float32)
        self._pos = 0
        self.feature_space = spaces.Box(0, 255, (self.stack, self.n_features), dtype=np.float32)

    def _set_permutation(self, perm: np.ndarray | None) -> None:
        self._perm = perm
        order = np.arange(self.n_features) if perm is None else perm
        self.feature_permutation = order.copy()
        self.feature_permutation.flags.writeable = False
        self.feature_names = [self.unshuffled_feature_names[i] for i in order]
        self._flat_idx = self._unshuffled_flat[order]

    def _read_frame(self) -> np.ndarray:
        for ram, ale in zip(self._ram_rows, self._ales, strict=True):
            ale.getRAM(ram)
        return self._ram_flat.take(self._flat_idx)

    def _push(self, frame: np.ndarray, fill: bool = False) -> np.ndarray:
        if fill:
            self._ring[:] = frame
            self._pos = 0
        else:
            self._pos = (self._pos + 1) % self.stack
            self._ring[self._pos] = frame
            self._ring[self._pos + self.stack] = frame
        return self._ring[self._pos + 1 : self._pos + 1 + self.stack].copy()

    def _distractor_actions(self) -> np.ndarray | list[int]:
        if self.distractor_policy == "random":
            return self.rng.integers(self._n_actions, size=self.n_distractors)
        if self.distractor_policy == "noop":
            return [0] * self.n_distractors
        own = self._ram[1:, self._indices].astype(np.float32)
        policy = self.distractor_policy
        assert callable(policy)  # __init__ admits no other strings
        return [policy(features) for features in own]

    def _reset_features(self, seed: int | None, info: dict[str, Any]) -> np.ndarray:
        """The stack after the played env's reset: the order and the distractors are
        (re)started, ``info`` gets the order."""
        fresh, self._started = not self._started, True
        self._reseed(seed)
        if seed is not None or fresh:
            if self._fixed_perm is None:
                self._set_permutation(self.rng.permutation(self.n_features))
            seeds = self.rng.integers(2**31 - 1, size=self.n_distractors)
            for d, s in zip(self._distractors, seeds, strict=True):
                d.reset(seed=int(s))
        else:
            for d in self._distractors:
                d.reset()
        info["feature_permutation"] = self.feature_permutation.copy()
        return self._push(self._read_frame(), fill=True)

    def _step_features(self) -> np.ndarray:
        """The stack after the played env's step: the distractors step too."""
        if self._distractors:
            actions = self._distractor_actions()
            for d, a in zip(self._distractors, actions, strict=True):
                _, _, d_term, d_trunc, _ = d.step(a)
                if d_term or d_trunc:
                    d.reset()
        return self._push(self._read_frame())

    def close(self) -> None:
        for d in self._distractors:
            d.close()
        self._distractors = []
        super().close()


class DistractorFeatureObservation(_DistractorFeatures[np.ndarray]):
    """Annotated-RAM features of the played game plus ``n_distractors`` uncontrolled copies.

    Every step, each distractor (a separate emulator of the same game with the played env's
    settings: frameskip, sticky actions, mode, ...) takes an action from
    ``distractor_policy``; the agent's action reaches only the played env. A distractor
    whose episode ends is reset and keeps going; the played env alone ends the episode.

    The per-step features, ``F * (n_distractors + 1)`` of them (played first, then each
    distractor), are reordered by one permutation, and the last ``stack`` steps are stacked
    oldest first, the stack filled with the first frame at reset. With ``order_seed`` the
    permutation is drawn once from it at construction and no reset changes it: the thesis
    shuffles the order once per training run, so all envs of a run (SB3 seeds actor ``i``
    with ``seed + i``) must share it. Without ``order_seed`` it is drawn at every
    ``reset(seed=s)`` (the same ``s`` gives the same permutation; resets without a seed keep
    it), which gives every differently seeded env its own order.

    Feature names travel in attributes, not in ``info`` (lists of strings do not stack in
    vector envs): ``feature_names[i]`` names column ``i``, e.g. ``"player/ball_x"`` or
    ``"distractor2/ball_x"``; ``feature_permutation[i]`` is its index in the unshuffled
    order ``unshuffled_feature_names``. The reset ``info`` carries
    ``info["feature_permutation"]``. Without ``order_seed`` the order is unshuffled before the
    first reset.

    Distractors are reseeded from the wrapper's generator at every seeded reset (and the
    first reset). Other resets reset them without a seed: that continues the emulators'
    random streams, which stay a deterministic function of the last seed, and avoids
    reloading the ROM (~0.1 s per emulator).

    Args:
        env: The played ALE env, or an ALE env id (made with ``obs_type="ram"``).
        n_distractors: Number of distractor games ``k`` (E7: 0, 1, 3 for L, 2L, 4L).
        stack: Number of time steps stacked.
        distractor_policy: ``"random"`` (uniform actions from the wrapper's generator),
            ``"noop"`` (action 0), or a callable mapping a distractor's own features
            (``(F,)`` float32, annotation order) to its action.
        game: Game name; ``None`` infers it from the env.
        order_seed: Seed of the feature order, fixed for the env's lifetime; ``None`` draws
            the order from each ``reset(seed=...)`` seed instead.

    Example:
        >>> from attn_envs.atari_ram import DistractorFeatureObservation
        >>> env = DistractorFeatureObservation("ALE/Pong-v5", n_distractors=1, stack=4)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype, len(env.feature_names)
        ((4, 16), dtype('float32'), 16)
        >>> sorted(env.feature_names)[:2]
        ['distractor1/ball_x', 'distractor1/ball_y']
        >>> obs, *_ = env.step(0)
        >>> obs.shape
        (4, 16)
        >>> env.close()
        >>> a = DistractorFeatureObservation("ALE/Pong-v5", n_distractors=1, order_seed=7)
        >>> b = DistractorFeatureObservation("ALE/Pong-v5", n_distractors=1, order_seed=7)
        >>> _ = a.reset(seed=1), b.reset(seed=2)  # one order per order_seed, whatever the seed
        >>> a.feature_names == b.feature_names
        True
        >>> a.close(), b.close()
        (None, None)
    """

    def __init__(
        self,
        env: gym.Env | str,
        n_distractors: int,
        stack: int = 4,
        distractor_policy: DistractorPolicy = "random",
        game: str | None = None,
        order_seed: int | None = None,
    ) -> None:
        super().__init__(env, n_distractors, stack, distractor_policy, game, order_seed)
        self.observation_space = self.feature_space

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        _, info = self.env.reset(seed=seed, options=options)
        return self._reset_features(seed, info), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        _, reward, terminated, truncated, info = self.env.step(action)
        return self._step_features(), reward, terminated, truncated, info


class RamFeatureEntryObservation(_DistractorFeatures[dict[str, Any]]):
    """Keep the env's observation and add its :class:`DistractorFeatureObservation` features
    as the Dict entry ``key``.

    A teacher trained on a game's RAM features (E7's ``atariari`` runs) can then act in a
    pixel env of the same emulator while a pixel student's data is recorded (E5: the
    Puzzle Pong teacher). Pass the teacher run's ``order_seed`` (its run seed), ``stack``
    and ``n_distractors``: the features and their order are exactly those the teacher was
    trained on, whatever wrappers sit between the emulator and this one.

    Args:
        env: An env whose ``unwrapped`` is an ALE ``AtariEnv`` (any observation).
        key: Name of the new entry.
        obs_key: Name of the env's observation when it is not already a Dict.
        n_distractors, stack, distractor_policy, game, order_seed: as
            :class:`DistractorFeatureObservation`.

    Raises:
        TypeError: the env is not an ALE env, or its observation is neither a Box nor a Dict.
        ValueError: ``key`` is already an entry, or equals ``obs_key``.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs.atari_ram import RamFeatureEntryObservation
        >>> env = RamFeatureEntryObservation(gym.make("ALE/Pong-v5"), order_seed=0)
        >>> obs, _ = env.reset(seed=0)
        >>> obs["observation"].shape, obs["ram_features"].shape
        ((210, 160, 3), (4, 8))
        >>> env.close()
    """

    _rng_stream = "DistractorFeatureObservation"  # the same orders as the teacher's env

    def __init__(
        self,
        env: gym.Env,
        key: str = "ram_features",
        obs_key: str = "observation",
        n_distractors: int = 0,
        stack: int = 4,
        distractor_policy: DistractorPolicy = "random",
        game: str | None = None,
        order_seed: int | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            key=key,
            obs_key=obs_key,
            n_distractors=n_distractors,
            stack=stack,
            distractor_policy=distractor_policy,
            game=game,
            order_seed=order_seed,
        )
        name = type(self).__name__
        if not isinstance(env, gym.Env):
            raise TypeError(f"{name} wraps an env, got {type(env).__name__}")
        inner = env.observation_space
        if isinstance(inner, spaces.Dict):
            if key in inner.spaces:
                raise ValueError(f"{name}: the Dict observation already has a {key!r} entry")
            entries = dict(inner.spaces)
        elif isinstance(inner, spaces.Box):
            if key == obs_key:
                raise ValueError(f"{name}: key and obs_key are both {key!r}")
            entries = {obs_key: inner}
        else:
            raise TypeError(f"{name} needs a Box or Dict observation, got {inner}")
        super().__init__(env, n_distractors, stack, distractor_policy, game, order_seed)
        self.key, self.obs_key = key, obs_key
        self._is_dict = isinstance(inner, spaces.Dict)
        self.observation_space = spaces.Dict({**entries, key: self.feature_space})

    def _entries(self, obs: Any, features: np.ndarray) -> dict[str, Any]:
        entries = obs if self._is_dict else {self.obs_key: obs}
        return {**entries, self.key: features}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._entries(obs, self._reset_features(seed, info)), info

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._entries(obs, self._step_features()), reward, terminated, truncated, info


def make_ram_feature_env(game: str = "Pong", **ale_kwargs: Any) -> gym.Env:
    """``ALE/{game}-v5`` with ``obs_type="ram"`` wrapped in ``RamFeatureObservation``.

    Example:
        >>> env = make_ram_feature_env("DemonAttack")
        >>> env.observation_space.shape
        (10,)
    """
    game = resolve_game(game)
    env = gym.make(f"ALE/{game}-v5", **{"obs_type": "ram", **ale_kwargs})
    return RamFeatureObservation(env, game=game)


def make_distractor_env(
    game: str = "Pong",
    n_distractors: int = 3,
    stack: int = 4,
    distractor_policy: DistractorPolicy = "random",
    order_seed: int | None = None,
    noop_frames: int = 0,
    **ale_kwargs: Any,
) -> gym.Env:
    """``ALE/{game}-v5`` (``obs_type="ram"``) wrapped in ``DistractorFeatureObservation``.

    ``order_seed`` fixes the feature order (see the wrapper); ``noop_frames`` > 0 puts
    :class:`attn_envs.atari_frames.NoopFrameReset` between the two (up to that many single
    NOOP frames at reset: every phase of the ALE env's frame skip, as a pixel agent's
    frame-level no-ops give it); the other keyword arguments go to the ALE env.

    Example:
        >>> env = make_distractor_env("Pong", n_distractors=0, stack=2)
        >>> env.observation_space.shape
        (2, 8)
    """
    game = resolve_game(game)
    env = gym.make(f"ALE/{game}-v5", **{"obs_type": "ram", **ale_kwargs})
    if require_integral(noop_frames, "noop_frames", minimum=0):
        env = NoopFrameReset(env, noop_max=noop_frames)
    return DistractorFeatureObservation(
        env,
        n_distractors=n_distractors,
        stack=stack,
        distractor_policy=distractor_policy,
        game=game,
        order_seed=order_seed,
    )
