"""Multi-stage recipes (``algo: recipe``): stages of any trainer, each warm-started from the
one before, in one run folder and from one command.

A recipe lists stages; each is a zoo experiment run with the recipe's budget (or its own)
and its own overrides, and by default starts (``init``) from the previous stage's best
model::

    cartpole_pi:
      algo: recipe
      env: attn_envs/CartPoleSwingUpHarder-v0   # the env of the final agent (documentation)
      stages:
        - {name: hold, experiment: cartpole_pi_hold_harder}
        - {name: catch, experiment: cartpole_pi_catch}          # init: the hold stage
        - name: tune_pop512
          experiment: cartpole_pi_tune
          overrides: {population: 512}                          # --set of this stage
        - {name: fnn, experiment: cartpole_fnn, init: null}     # no warm start
        - {name: clone, experiment: cartpole_pi_bc, teacher: fnn, init: null}
      eval: {final_episodes: 1000, test_seed: 3000000}

Stage keys: ``experiment`` (required: a name from ``attn-zoo list`` or ``file.yml:name``),
``name`` (default: the experiment's; the stage folder is ``stages/<k>_<name>``), ``budget``
(default: the recipe's), ``overrides`` (``{dotted key: value}``, applied after the budget),
``init`` (an earlier stage's name, or null; default: the previous stage, and for the first
stage what its experiment says) and ``teacher`` (an earlier stage's name, for ``bc`` and
``dagger`` stages).

Stage *k* (from 0) of a recipe run with seed *S* trains with seed ``100 * S + k``, so every
stage seed derives from ``--seed`` and no two stages or recipe seeds share one; a stage may
not set ``seed`` itself. Each stage is a complete run folder (``config.yml``, ``status.json``,
``eval.json``...) under the recipe's ``stages/``; the recipe's own ``status.json`` says which
stage is training and its ``eval.json`` is the final stage's best model tested on the
recipe's ``eval`` (``final_episodes``, ``test_seed``). ``train --resume`` skips the finished
stages and resumes the one that was cut. Loading, evaluating, recording, attention maps and
robustness sweeps of a recipe folder act on its final stage.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zoo
import zoo.config
from attn_policies.atomic import make_folder
from zoo.config_checks import ConfigError, RunConfig, nearest
from zoo.trainers import get_episode_trainer, get_trainer, keys
from zoo.trainers.contract import KeyTypes, RunHandle, register

if TYPE_CHECKING:
    import gymnasium as gym

    from attn_policies.agents import Agent


@dataclass(frozen=True)
class RecipeKeys:
    """The keys of ``algo: recipe`` runs (a stage's: :mod:`zoo.trainers.recipe_trainer`)."""

    stages: list[dict[str, Any]] = keys.key(
        doc="the stages in order, each `{name, experiment, budget, overrides, init, teacher}` "
        "(experiment required)",
        required=True,
    )
    env: str | None = keys.key(None, "the env of the final agent (documentation)")


KEYS: KeyTypes = keys.key_types(RecipeKeys)
STAGE_KEYS = ("name", "experiment", "budget", "overrides", "init", "teacher")
SEED_STRIDE = 100  # stage k of recipe seed S trains with seed SEED_STRIDE * S + k
MAX_STAGES = SEED_STRIDE
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PREVIOUS = object()  # a stage's init when the config leaves it out


@dataclass(frozen=True)
class Stage:
    """One stage of a recipe, as the config gives it (references by stage name)."""

    index: int
    name: str
    experiment: str
    budget: str
    overrides: dict[str, Any]
    init: str | object | None  # a stage name, None, or _PREVIOUS (the default)
    teacher: str | None

    @property
    def folder(self) -> str:
        """The stage's folder, relative to the recipe's run folder."""
        return f"stages/{self.index + 1}_{self.name}"


def plan(run: RunConfig) -> list[Stage]:
    """The recipe's stages, checked: mappings of known keys, unique names, references to
    earlier stages only, no ``seed`` of their own.

    Raises:
        ConfigError: naming the stage and what is wrong.
    """
    raw = run.body.get("stages")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{run.name}: 'stages' must be a non-empty list of stage mappings")
    if len(raw) > MAX_STAGES:
        raise ConfigError(f"{run.name}: at most {MAX_STAGES} stages, got {len(raw)}")
    stages: list[Stage] = []
    for k, spec in enumerate(raw):
        where = f"{run.name}: stages[{k}]"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where} must be a mapping, got {spec!r}")
        for key in spec:
            if key not in STAGE_KEYS:
                raise ConfigError(
                    f"{where}: unknown key {key!r} (a stage has {', '.join(STAGE_KEYS)})."
                    f"{nearest(str(key), STAGE_KEYS)}"
                )
        experiment = spec.get("experiment")
        if not isinstance(experiment, str) or not experiment:
            raise ConfigError(f"{where} needs 'experiment': the zoo experiment it runs")
        name = spec.get("name", experiment)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(
                f"{where}: 'name' must be letters, digits, '_', '.' or '-', got {name!r}"
            )
        if any(s.name == name for s in stages):
            raise ConfigError(f"{where}: a stage named {name!r} comes earlier; names are unique")
        budget = spec.get("budget", run.budget)
        if not isinstance(budget, str):
            raise ConfigError(f"{where}: 'budget' must be a budget name, got {budget!r}")
        overrides = spec.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise ConfigError(f"{where}: 'overrides' must be a mapping of key -> value")
        for key in overrides:
            if str(key).split(".")[0] in ("seed", "init", "teacher"):
                raise ConfigError(
                    f"{where}: overrides may not set {key!r}: stage seeds derive from the "
                    "recipe's seed, and init/teacher are stage keys naming earlier stages"
                )
        refs: dict[str, Any] = {}
        for key in ("init", "teacher"):
            ref = spec.get(key, _PREVIOUS if key == "init" else None)
            if ref is _PREVIOUS or ref is None:
                refs[key] = ref
                continue
            if not isinstance(ref, str) or not any(s.name == ref for s in stages):
                earlier = [s.name for s in stages]
                raise ConfigError(
                    f"{where}: {key!r} must name an earlier stage "
                    f"({', '.join(earlier) or 'none yet'}) or be null, got {ref!r}"
                    f".{nearest(str(ref), earlier)}"
                )
            refs[key] = ref
        stages.append(Stage(k, name, experiment, budget, dict(overrides), refs["init"],
                            refs["teacher"]))  # fmt: skip
    return stages


def stage_seed(run: RunConfig, stage: Stage) -> int:
    """The seed stage ``stage`` trains with: ``100 * recipe seed + stage index``."""
    return SEED_STRIDE * run.seed + stage.index


def stage_config(run: RunConfig, stage: Stage, root: Path | None) -> RunConfig:
    """The stage's resolved config; ``init``/``teacher`` point at the earlier stages'
    folders under ``root`` (the recipe's run folder; relative ``stages/...`` paths when
    ``root`` is None, as validation sees them: no folder exists yet)."""
    stages = plan(run)
    by_name = {s.name: s for s in stages}

    def folder(name: str) -> str:
        relative = by_name[name].folder
        return relative if root is None else str(root / relative)

    overrides: dict[str, Any] = dict(stage.overrides)
    init = stage.init
    if init is _PREVIOUS and stage.index > 0:
        init = stages[stage.index - 1].name
    if init is None and _takes_init(stage):
        overrides["init"] = None
    elif isinstance(init, str):
        overrides["init"] = folder(init)
    if stage.teacher is not None:
        overrides["teacher"] = folder(stage.teacher)
    where = f"{run.name}: stage {stage.index + 1} ({stage.name})"
    try:
        runs = zoo.load_runs(stage.experiment, budget=stage.budget, overrides=overrides,
                             seed=stage_seed(run, stage))  # fmt: skip
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    if len(runs) != 1:
        raise ConfigError(
            f"{where}: {stage.experiment} expands into {len(runs)} runs; pick one cell with "
            "the stage's overrides (e.g. {game: Pong})"
        )
    if runs[0].algo == "recipe":
        raise ConfigError(f"{where}: a stage cannot be a recipe itself ({stage.experiment})")
    return runs[0]


def _takes_init(stage: Stage) -> bool:
    """Whether the stage's trainer has an ``init`` key (``init: null`` clears it there)."""
    raw = zoo.config.find_experiment(stage.experiment)[1]
    algo = raw.get("algo")
    return isinstance(algo, str) and "init" in get_trainer(algo).config_keys(raw)


def final_stage(path: str | Path, run: RunConfig) -> Any:
    """The :class:`zoo.runs.Run` of a recipe folder's last stage (what it hands on)."""
    last = plan(run)[-1]
    folder = Path(path) / last.folder
    if not (folder / "config.yml").exists():
        raise FileNotFoundError(
            f"{path} holds no trained model: its last stage ({last.folder}) has not started"
        )
    return zoo.load(folder)


@register("recipe")
class RecipeTrainer:
    """Trains a recipe's stages one after the other into ``stages/`` of the run folder."""

    config_model: type = RecipeKeys

    def config_keys(self, body: dict[str, Any]) -> KeyTypes:
        return KEYS

    def validate(self, run: RunConfig) -> None:
        for stage, spec in zip(plan(run), run.body["stages"], strict=True):
            stage_config(run, stage, None)
            spec.setdefault("budget", stage.budget)  # config.yml says which budget ran

    def check_trusted(self, run: RunConfig, trusted: Collection[str | Path]) -> None:
        """Each stage's check of the pickled files it would load (a BC stage's teacher),
        before the first stage starts."""
        for stage in plan(run):
            config = stage_config(run, stage, None)
            check = getattr(get_trainer(config.algo), "check_trusted", None)
            if check is not None and stage.teacher is None:
                check(config, trusted)

    def final_stage(self, path: Path, run: RunConfig) -> Any:
        return final_stage(path, run)

    def probe(self, run: RunConfig) -> None:
        """Build each stage's env and model once; a stage that starts from an earlier one
        is built from fresh weights (its warm start does not exist yet), one that needs an
        earlier stage as its teacher is left to its own start."""
        for stage in plan(run):
            config = stage_config(run, stage, None)
            if stage.teacher is not None:
                continue
            if stage.index > 0 and stage.init is not None:
                config = dataclasses.replace(config, body={**config.body, "init": None})
            get_trainer(config.algo).probe(config)

    def train(
        self,
        handle: RunHandle,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        stages = plan(handle.config)
        steps = 0
        for stage in stages:
            # a real folder inside the recipe's: a linked stages/ or stage folder of a shared
            # recipe is replaced by an empty one (that stage trains afresh), never followed
            folder = make_folder(handle.path / stage.folder, inside=handle.path)
            status = zoo.load(folder).status if (folder / "config.yml").exists() else {}
            handle.write_status(stage=f"{stage.index + 1}/{len(stages)} {stage.name}")
            if status.get("state") == "finished":
                pass  # a resumed recipe skips what it already trained
            elif status:
                zoo.resume(folder, callbacks=callbacks, progress_bar=progress_bar,
                           trust_teacher=handle.trusted)  # fmt: skip
            else:
                config = stage_config(handle.config, stage, handle.path)
                command = (
                    f"stage {stage.index + 1}/{len(stages)} of {handle.config.name} "
                    f"(recipe seed {handle.config.seed}): {stage.experiment} --budget "
                    f"{stage.budget} --seed {config.seed}"
                )
                zoo.train(config, run_dir=folder, callbacks=callbacks,
                          progress_bar=progress_bar, command=command,
                          trust_teacher=handle.trusted)  # fmt: skip
            steps += int(zoo.load(folder).status.get("num_timesteps") or 0)
        return steps

    def load(self, path: Path, run: RunConfig, which: str = "best") -> Any:
        return final_stage(path, run).model(which)

    def agent(self, path: Path, run: RunConfig, which: str = "best") -> Agent:
        return final_stage(path, run).agent(which)

    def model_file(self, path: Path, which: str) -> Path | tuple[Path, Path]:
        last = zoo.load(path)
        stage = final_stage(path, last.config)
        return get_episode_trainer(stage.config.algo).model_file(stage.path, which)

    def evaluate(
        self,
        path: Path,
        run: RunConfig,
        n_episodes: int | None = None,
        which: str = "best",
        seed: int | None = None,
    ) -> dict[str, Any]:
        """The final stage's model on the recipe's test episodes (``eval.final_episodes``
        from ``eval.test_seed``), in the final stage trainer's ``eval.json`` shape."""
        stage = final_stage(path, run)
        out = get_trainer(stage.config.algo).evaluate(
            stage.path,
            stage.config,
            n_episodes=run.eval.final_episodes if n_episodes is None else n_episodes,
            which=which,
            seed=run.eval.test_seed if seed is None else seed,
        )
        out.update(experiment=run.experiment, tag=run.tag, budget=run.budget,
                   stage=stage.path.relative_to(path).as_posix())  # fmt: skip
        return out

    def episode_returns(
        self,
        path: Path,
        run: RunConfig,
        *,
        wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
        n_episodes: int,
        seed: int,
        which: str = "best",
        policy_kwargs: dict[str, Any] | None = None,
        n_envs: int | None = None,
    ) -> dict[str, list[float]]:
        stage = final_stage(path, run)
        return get_episode_trainer(stage.config.algo).episode_returns(
            stage.path, stage.config, wrappers=wrappers, n_episodes=n_episodes, seed=seed,
            which=which, policy_kwargs=policy_kwargs, n_envs=n_envs,
        )  # fmt: skip
