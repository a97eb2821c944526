"""The break-it pass of issue 16, rerunnable: hostile inputs and faults, one outcome per probe.

Every probe drives the real ``attn-zoo`` CLI in a subprocess (or the library where the CLI
has no handle) in a temporary folder and checks one promise:

- bad configs and values: exit 2, one ``attn-zoo: error:`` line, no traceback, no folder;
- hostile artefacts (pickles that write a marker file, tampered or damaged files): refused
  or ignored, never run;
- kills: SIGKILL mid-run then ``--resume`` ends bit for bit where an uninterrupted CMA-ES
  run ends; a second SIGINT 0-80 ms after the first leaves a loadable SB3 checkpoint;
- concurrency: runs started together get distinct folders; ``--resume`` of a live run is
  refused; a dead holder's lock is taken over;
- a write that fails (file-size limit, as a full disk) keeps the previous checkpoint and
  marks the run ``failed`` with the reason;
- issue 46's faults (``--only faults46``): SIGINT inside an SB3 evaluation loses no logged
  value, a full disk at start leaves no half folder, a stop before any folder claims no
  checkpoint, a second SIGINT while a CMA-ES run exits keeps 130, a refused ``--resume``
  changes no byte;
- denial of service and stray writes (issue 46, ``--only dos``): a YAML alias bomb, files
  and folders of a run folder linked elsewhere, a config naming the Ray cluster or an
  unreachable one, sizes whose memory is refused from the config or an ``.npz`` header
  before any allocation, and bad values of an imported ``config.gin``;
- issue 68's third pass (``--only pass68``): a run folder's own ``.git`` whose
  ``core.fsmonitor`` would run, experiment names leaving ``--root``, linked ``logs/``,
  ``robustness/`` and ``report/``, a ``RecordVideo`` writing elsewhere, an ``eval.json``
  injecting into Markdown or holding no number, JSON nested 100k deep, deflate bombs;
- issue 68's "not yet probed" (``--only pass68b``): two ``train --resume`` of one folder at
  once, SIGKILL and SIGTERM inside ``report``, ``robustness`` and ``import``, a full disk in
  ``import`` and ``report``, hostile ``--allow-import``, ``ATTN_ZOO_ALLOW_IMPORT`` and
  ``--trust-teacher``, links and ``..`` in ``import --restore`` and a recipe's ``stages/``,
  a 1 GB line in ``metrics.csv``.

``--only`` refreshes the named categories in ``--out`` and keeps the others' results.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/break_it.py [--out benchmarks/results/break_it.json]

Exit status 0 when every probe holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

PPO: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_envs": 1,
    "n_steps": 32,
    "batch_size": 32,
    "n_epochs": 1,
    "n_timesteps": 64,
    "save_freq": 32,
    "normalize": True,
    "policy_kwargs": {"net_arch": [8]},
    "eval": {"freq": 0, "final_episodes": 2},
}
DQN: dict[str, Any] = {
    "algo": "dqn",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_timesteps": 4000,
    "buffer_size": 4000,
    "learning_starts": 100,
    "save_freq": 500,
    "policy_kwargs": {"net_arch": [8]},
    "eval": {"freq": 0, "final_episodes": 2},
}
CMAES: dict[str, Any] = {
    "algo": "cmaes",
    "env": "attn_envs/CartPoleSwingUpHarder-v0",
    "policy": "fnn",
    "n_generations": 40,
    "population": 16,
    "repeats": 2,
    "max_episode_steps": 200,
    "eval": {"freq": 10, "n_episodes": 2, "final_episodes": 2},
}

BAD_CONFIGS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("n_timesteps 0", PPO, {"n_timesteps": 0}),
    ("n_timesteps negative", PPO, {"n_timesteps": -5}),
    ("n_timesteps 1e13", PPO, {"n_timesteps": 10**13}),
    ("n_envs 0", PPO, {"n_envs": 0}),
    ("torch_threads 100000", PPO, {"torch_threads": 100000}),
    ("gamma 1.5", PPO, {"gamma": 1.5}),
    ("gamma negative", PPO, {"gamma": -0.1}),
    ("batch_size 0", PPO, {"batch_size": 0}),
    ("save_freq negative", PPO, {"save_freq": -1}),
    ("learning_rate negative", PPO, {"learning_rate": -1.0}),
    ("learning_rate nan", PPO, {"learning_rate": float("nan")}),
    ("unknown key", PPO, {"n_timestep": 5}),
    ("policy typo", PPO, {"policy": "MlpPolcy"}),
    ("buffer_size 1e12", DQN, {"buffer_size": 10**12 - 1}),
    ("buffer_size 1e10 (memory estimate)", DQN, {"buffer_size": 10**10}),
    ("buffer_size 0", DQN, {"buffer_size": 0}),
    ("n_generations 0", CMAES, {"n_generations": 0}),
    ("max_episode_steps 0", CMAES, {"max_episode_steps": 0}),
    ("sigma0 0", CMAES, {"sigma0": 0}),
    ("sigma0 inf", CMAES, {"sigma0": float("inf")}),
    ("population 1", CMAES, {"population": 1}),
    ("cma_options unknown key", CMAES, {"cma_options": {"CMA_diagonl": True}}),
    ("n_workers 0", CMAES, {"evaluator": "processes", "n_workers": 0}),
    ("evaluator typo", CMAES, {"evaluator": "proceses"}),
]
# The authors' cartpole_pi config.gin (seed 001), for the import probes.
PI_GIN = """torch_solutions.PIFCSolution.act_dim = 1
torch_solutions.PIFCSolution.hidden_dim = 16
torch_solutions.PIFCSolution.msg_dim = 32
torch_solutions.PIFCSolution.pos_em_dim = 8
torch_solutions.PIFCSolution.num_hidden_layers = 0
torch_solutions.PIFCSolution.pi_layer_bias = False
torch_solutions.PIFCSolution.pi_layer_scale = False
util.create_solution.solution_loader = @torch_solutions.PIFCSolution
util.create_task.task_loader = @rl_tasks.CartPoleSwingUpTask()
"""
CALLABLES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("cmaes policy os:system", CMAES, {"policy": "os:system", "policy_kwargs": {"command": "@"}}),
    ("cmaes action_fn os:system", CMAES, {"action_fn": "os:system"}),
    ("sb3 policy os:system", PPO, {"policy": "os:system"}),
    ("sb3 algo os:system", PPO, {"algo": "os:system"}),
    ("wrapper os:system", PPO, {"env_wrapper": [{"os:system": {"command": "@"}}]}),
    ("extractor os:system", PPO, {"policy_kwargs": {"features_extractor_class": "os:system"}}),
    ("activation os:system", PPO, {"policy_kwargs": {"activation_fn": "os:system"}}),
    ("replay buffer os:system", DQN, {"replay_buffer_class": "os:system"}),
]


def payload(marker: Path) -> bytes:
    """A pickle that runs ``os.system("touch <marker>")`` when unpickled."""
    command = f"touch {marker}".encode()
    return (
        b"\x80\x04\x8c\x02os\x8c\x06system\x93"
        + b"\x8c" + bytes([len(command)]) + command
        + b"\x85R."
    )  # fmt: skip


def numpy_bypass(marker: Path) -> bytes:
    """``os.system`` reached through ``numpy``: what the old CMA-ES unpickler admitted."""
    name, command = b"testing._private.utils.os.system", f"touch {marker}".encode()
    return (
        b"\x80\x04\x8c\x05numpy\x8c" + bytes([len(name)]) + name + b"\x93"
        + b"\x8c" + bytes([len(command)]) + command
        + b"\x85R."
    )  # fmt: skip


class Prober:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.results: list[dict[str, Any]] = []
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}

    # -- helpers ---------------------------------------------------------------------------

    def cli(self, *args: str, limit_bytes: int | None = None, timeout: float = 600) -> Any:
        def limits() -> None:
            if limit_bytes is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

        return subprocess.run(
            [sys.executable, "-m", "zoo.cli", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            preexec_fn=limits,
        )

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "zoo.cli", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def config(self, name: str, body: dict[str, Any]) -> Path:
        folder = Path(tempfile.mkdtemp(dir=self.work, prefix=f"{name}-"))
        path = folder / f"{name}.yml"
        path.write_text(yaml.safe_dump({name: body}, sort_keys=False))
        return path

    def record(self, category: str, name: str, check: Callable[[], tuple[bool, str]]) -> None:
        start = time.perf_counter()
        try:
            ok, detail = check()
        except Exception as err:  # a probe that crashes is a failed probe
            ok, detail = False, f"probe crashed: {type(err).__name__}: {err}"
        seconds = round(time.perf_counter() - start, 1)
        self.results.append(
            {"category": category, "probe": name, "ok": ok, "detail": detail, "s": seconds}
        )
        print(f"{'ok  ' if ok else 'FAIL'} [{category}] {name}: {detail} ({seconds} s)", flush=True)

    @staticmethod
    def one_line_exit_2(proc: Any) -> tuple[bool, str]:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        ok = (
            proc.returncode == 2
            and len(lines) == 1
            and lines[0].startswith("attn-zoo: error:")
            and "Traceback" not in proc.stderr
        )
        return ok, f"exit {proc.returncode}: {lines[-1][:150] if lines else '(no message)'}"

    # -- probes ----------------------------------------------------------------------------

    def bad_configs(self) -> None:
        for name, base, change in BAD_CONFIGS:

            def check(base: dict[str, Any] = base, change: dict[str, Any] = change) -> Any:
                config = self.config("bad", {**base, **change})
                root = config.parent / "runs"
                proc = self.cli("train", str(config), "--root", str(root), "--no-progress")
                ok, detail = self.one_line_exit_2(proc)
                return ok and not root.exists(), detail + ("" if not root.exists() else "; folder!")

            self.record("bad config", name, check)

        def bad_yaml(text: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                config = self.config("bad", {})
                config.write_text(text)
                return self.one_line_exit_2(self.cli("train", str(config), "--no-progress"))

            return check

        self.record("bad config", "YAML syntax error", bad_yaml("bad: {algo: ppo, env: [\n"))
        marker = self.work / "yaml-marker"
        tag = f"bad: !!python/object/apply:os.system ['touch {marker}']\n"
        self.record("bad config", "unsafe YAML tag", bad_yaml(tag))

        def bad_set() -> tuple[bool, str]:
            config = self.config("cart", PPO)
            return self.one_line_exit_2(self.cli("train", str(config), "--set", "n_timesteps"))

        self.record("bad config", "--set without '='", bad_set)

    def callables(self) -> None:
        for name, base, change in CALLABLES:

            def check(base: dict[str, Any] = base, change: dict[str, Any] = change) -> Any:
                marker = self.work / f"marker-{random.getrandbits(32)}"
                text = json.dumps({**base, **change}).replace("@", f"touch {marker}")
                config = self.config("evil", json.loads(text))
                ok, detail = self.one_line_exit_2(
                    self.cli("train", str(config), "--root", str(config.parent / "r"))
                )
                return ok and not marker.exists(), detail

            self.record("config runs code", name, check)

    def artefacts(self) -> None:
        ppo_cfg = self.config("cart", PPO)
        proc = self.cli("train", str(ppo_cfg), "--root", str(ppo_cfg.parent / "runs"))
        if proc.returncode != 0:
            self.record("artefact", "train the PPO run", lambda: (False, proc.stderr[-300:]))
            return
        (ppo,) = (ppo_cfg.parent / "runs" / "cart").iterdir()
        expected = json.loads(self.cli("evaluate", str(ppo), "--json").stdout or "{}").get(
            "policies"
        )

        def copy() -> Path:
            target = Path(tempfile.mkdtemp(dir=self.work, prefix="copy-")) / "run"
            shutil.copytree(ppo, target)
            return target

        def poison_zip(file: Path, marker: Path) -> None:
            with zipfile.ZipFile(file) as archive:
                entries = {n: archive.read(n) for n in archive.namelist()}
            data = json.loads(entries["data"])
            data["policy_class"][":serialized:"] = base64.b64encode(payload(marker)).decode()
            entries["data"] = json.dumps(data).encode()
            with zipfile.ZipFile(file, "w") as archive:
                for n, content in entries.items():
                    archive.writestr(n, content)

        def interrupted(run: Path) -> None:
            status = json.loads((run / "status.json").read_text())
            (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))

        def poisoned_model(which: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run, marker = copy(), self.work / f"m-{random.getrandbits(32)}"
                poison_zip(run / which, marker)
                proc = self.cli("evaluate", str(run), "--json", "--which", "last")
                result = json.loads(proc.stdout or "{}").get("policies")
                same = result == expected
                return (
                    proc.returncode == 0 and same and not marker.exists(),
                    f"exit {proc.returncode}, same figures: {same}, marker: {marker.exists()}",
                )

            return check

        self.record("artefact", "poisoned model.zip on evaluate", poisoned_model("model.zip"))

        def poisoned_last() -> tuple[bool, str]:
            run, marker = copy(), self.work / f"m-{random.getrandbits(32)}"
            poison_zip(run / "checkpoints" / "last.zip", marker)
            interrupted(run)
            proc = self.cli("train", "--resume", str(run), "--no-progress")
            return proc.returncode == 0 and not marker.exists(), f"exit {proc.returncode}"

        self.record("artefact", "poisoned last.zip on --resume", poisoned_last)

        for name, command in (
            ("vecnormalize.pkl", "evaluate"),
            ("checkpoints/last_vecnormalize.pkl", "resume"),
            ("checkpoints/last_replay_buffer.pkl", "resume"),
        ):

            def check(name: str = name, command: str = command) -> tuple[bool, str]:
                run, marker = copy(), self.work / f"m-{random.getrandbits(32)}"
                (run / name).write_bytes(payload(marker))
                for npz in run.glob("vecnormalize*.npz"):
                    npz.unlink()
                if command == "resume":
                    interrupted(run)
                    proc = self.cli("train", "--resume", str(run), "--no-progress")
                else:
                    proc = self.cli("evaluate", str(run))
                ok, detail = self.one_line_exit_2(proc)
                return ok and not marker.exists(), detail

            self.record("artefact", f"pickled {name} on {command}", check)

        def damaged(name: str, content: bytes, *args: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run = copy()
                (run / name).write_bytes(content)
                return self.one_line_exit_2(self.cli(*args, str(run)))

            return check

        self.record("artefact", "truncated model.zip", damaged("model.zip", b"PK\x03", "evaluate"))
        self.record("artefact", "damaged status.json", damaged("status.json", b"{", "evaluate"))
        self.record(
            "artefact", "YAML error in config.yml", damaged("config.yml", b"a: [", "evaluate")
        )
        self.record(
            "artefact", "evaluate --episodes 0", lambda: self.one_line_exit_2(
                self.cli("evaluate", str(ppo), "--episodes", "0")
            )
        )  # fmt: skip

        def foreign_config() -> tuple[bool, str]:
            run, marker = copy(), self.work / f"m-{random.getrandbits(32)}"
            config = yaml.safe_load((run / "config.yml").read_text())
            body = next(iter(config.values()))
            body.update(algo="cmaes", policy="os:system", n_generations=1)
            body["policy_kwargs"] = {"command": f"touch {marker}"}
            for key in ("n_steps", "batch_size", "n_epochs", "n_envs", "normalize", "save_freq"):
                body.pop(key, None)
            (run / "config.yml").write_text(yaml.safe_dump(config))
            ok, detail = self.one_line_exit_2(self.cli("evaluate", str(run)))
            return ok and not marker.exists(), detail

        self.record("artefact", "foreign config.yml calling os:system", foreign_config)

        cma_cfg = self.config("es", {**CMAES, "n_generations": 3})
        proc = self.cli("train", str(cma_cfg), "--root", str(cma_cfg.parent / "runs"))
        (es,) = (cma_cfg.parent / "runs" / "es").iterdir()

        def cma_pickle() -> tuple[bool, str]:
            target = Path(tempfile.mkdtemp(dir=self.work)) / "run"
            shutil.copytree(es, target)
            marker = self.work / f"m-{random.getrandbits(32)}"
            (state,) = (target / "checkpoints").glob("cma_state-*.npz")
            state.write_bytes(numpy_bypass(marker))
            interrupted(target)
            ok, detail = self.one_line_exit_2(self.cli("train", "--resume", str(target)))
            return ok and not marker.exists(), detail

        self.record("artefact", "CMA-ES state: numpy.*.os.system pickle", cma_pickle)
        self.record(
            "artefact", "truncated CMA-ES best_model.pt",
            lambda: self._damaged_copy(es, "best_model.pt", b"\x80\x02", "evaluate"),
        )  # fmt: skip

    def _damaged_copy(self, run: Path, name: str, content: bytes, command: str) -> Any:
        target = Path(tempfile.mkdtemp(dir=self.work)) / "run"
        shutil.copytree(run, target)
        (target / name).write_bytes(content)
        return self.one_line_exit_2(self.cli(command, str(target)))

    def kills(self, trials: int) -> None:
        config = self.config("es", CMAES)
        root = config.parent / "runs"
        straight = self.cli("train", str(config), "--root", str(root / "a"), "--no-progress")
        (reference,) = (root / "a" / "es").iterdir()
        if straight.returncode != 0:
            self.record("kill", "uninterrupted CMA-ES run", lambda: (False, straight.stderr[-300:]))
            return
        import torch

        want = torch.load(reference / "model.pt", weights_only=True)
        for trial in range(trials):

            def check(trial: int = trial) -> tuple[bool, str]:
                out = root / f"k{trial}"
                proc = self.spawn("train", str(config), "--root", str(out), "--no-progress")
                deadline = time.time() + 120
                while not list(out.glob("es/*/checkpoints/trainer.json")):
                    if time.time() > deadline or proc.poll() is not None:
                        return False, "no checkpoint appeared"
                    time.sleep(0.02)
                time.sleep(random.uniform(0.0, 0.5))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                (run,) = (out / "es").iterdir()
                generation = json.loads((run / "checkpoints" / "trainer.json").read_text())
                resumed = self.cli("train", "--resume", str(run), "--no-progress")
                got = torch.load(run / "model.pt", weights_only=True)
                same = all(torch.equal(got[k], want[k]) for k in want)
                return (
                    resumed.returncode == 0 and same,
                    f"killed after generation {generation['generation']}, resumed exit "
                    f"{resumed.returncode}, bit for bit: {same}",
                )

            self.record("kill", f"CMA-ES SIGKILL + --resume #{trial}", check)

        dqn = self.config("dqn", DQN)
        for trial in range(trials):

            def double_ctrl_c(trial: int = trial) -> tuple[bool, str]:
                out = dqn.parent / f"runs{trial}"
                proc = self.spawn("train", str(dqn), "--root", str(out), "--no-progress")
                deadline = time.time() + 120
                while not list(out.glob("dqn/*/checkpoints/last.zip")):
                    if time.time() > deadline or proc.poll() is not None:
                        return False, "no checkpoint appeared"
                    time.sleep(0.02)
                time.sleep(random.uniform(0.0, 0.3))
                proc.send_signal(signal.SIGINT)
                gap = random.uniform(0.0, 0.08)
                time.sleep(gap)
                proc.send_signal(signal.SIGINT)
                proc.wait()
                (run,) = (out / "dqn").iterdir()
                resumed = self.cli("train", "--resume", str(run), "--no-progress")
                return (
                    resumed.returncode == 0,
                    f"second SIGINT {gap * 1000:.0f} ms after the first; resume exit "
                    f"{resumed.returncode} {resumed.stderr.strip()[-150:]}",
                )

            self.record("kill", f"SB3 DQN double Ctrl-C #{trial}", double_ctrl_c)

        def before_first_checkpoint() -> tuple[bool, str]:
            out = dqn.parent / "early"
            proc = self.spawn("train", str(dqn), "--root", str(out), "--no-progress")
            while not list(out.glob("dqn/*/status.json")):
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            (run,) = (out / "dqn").iterdir()
            had = (run / "checkpoints" / "last.zip").exists()
            resumed = self.cli("train", "--resume", str(run), "--no-progress")
            return (
                resumed.returncode == 0,
                f"checkpoint existed: {had}; resume exit {resumed.returncode}",
            )

        self.record("kill", "SIGKILL before the first checkpoint", before_first_checkpoint)

    def concurrency(self) -> None:
        config = self.config("cart", {**PPO, "n_timesteps": 32})
        root = config.parent / "runs"

        def same_second() -> tuple[bool, str]:
            procs = [self.spawn("train", str(config), "--root", str(root)) for _ in range(3)]
            for proc in procs:
                proc.wait()
            folders = list((root / "cart").iterdir())
            codes = [p.returncode for p in procs]
            return len(folders) == 3 and codes == [
                0,
                0,
                0,
            ], f"{len(folders)} folders, exits {codes}"

        self.record("concurrency", "three runs started together", same_second)

        def live_resume() -> tuple[bool, str]:
            dqn = self.config("dqn", {**DQN, "n_timesteps": 100_000})  # still live when killed
            out = dqn.parent / "runs"
            proc = self.spawn("train", str(dqn), "--root", str(out), "--no-progress")
            while not list(out.glob("dqn/*/checkpoints/last.zip")):
                time.sleep(0.02)
            (run,) = (out / "dqn").iterdir()
            second = self.cli("train", "--resume", str(run))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            ok, detail = self.one_line_exit_2(second)
            from zoo.trainers.sb3_state import read_counters

            done = int(read_counters(run / "checkpoints" / "last.zip")["num_timesteps"])
            text = (run / "config.yml").read_text()  # 500 more steps, not all 100,000
            (run / "config.yml").write_text(
                text.replace("n_timesteps: 100000", f"n_timesteps: {done + 500}")
            )
            stale = self.cli("train", "--resume", str(run), "--no-progress")
            return (
                ok and "in use by process" in second.stderr and stale.returncode == 0,
                f"{detail}; after SIGKILL of the holder: exit {stale.returncode} "
                f"{stale.stderr.strip()[:150]}",
            )

        self.record("concurrency", "--resume of a live run, then of a killed one", live_resume)

    def disk_full(self) -> None:
        def check() -> tuple[bool, str]:
            config = self.config("dqn", {**DQN, "n_timesteps": 1000, "buffer_size": 5000})
            root = config.parent / "runs"
            first = self.cli("train", str(config), "--root", str(root), "--no-progress")
            (run,) = (root / "dqn").iterdir()
            status = json.loads((run / "status.json").read_text())
            (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
            # 1000 more steps to train, so the resumed run writes checkpoints again.
            text = (
                (run / "config.yml").read_text().replace("n_timesteps: 1000", "n_timesteps: 2000")
            )
            (run / "config.yml").write_text(text)
            before = (run / "checkpoints" / "last.zip").read_bytes()
            # Writes over 20 kB fail (EFBIG), as on a full disk; status.json still fits.
            limited = self.cli("train", "--resume", str(run), "--no-progress", limit_bytes=20_000)
            status = json.loads((run / "status.json").read_text())
            kept = (run / "checkpoints" / "last.zip").read_bytes() == before
            again = self.cli("train", "--resume", str(run), "--no-progress")
            ok = (
                first.returncode == 0
                and limited.returncode != 0
                and status.get("state") == "failed"
                and kept
                and again.returncode == 0
            )
            return ok, (
                f"limited exit {limited.returncode}, status {status.get('state')} "
                f"({str(status.get('reason'))[:80]}), checkpoint kept: {kept}, "
                f"resume after: exit {again.returncode}"
            )

        self.record("disk", "checkpoint write fails (file-size limit)", check)

    # -- issue 46, items 5-8 and the gin part of 11 (bombs, symlinks, Ray, memory) ---------

    def dos(self) -> None:
        """A YAML bomb, writes through symlinks, a config choosing the Ray cluster, memory
        allocated before the checks, an .npz bomb and bad values in an imported gin file."""
        lol = ["  lol0: &lol0 [" + ", ".join(["lol"] * 9) + "]"] + [
            f"  lol{k}: &lol{k} [" + ", ".join([f"*lol{k - 1}"] * 9) + "]" for k in range(1, 9)
        ]  # 9 levels x 9 aliases: 9**9 strings once expanded
        bomb = self.config("bomb", PPO)
        bomb.write_text(bomb.read_text() + "\n".join(lol) + "\n")
        ppo_cfg = self.config("cart", PPO)
        self.cli("train", str(ppo_cfg), "--root", str(ppo_cfg.parent / "runs"), "--no-progress")
        (ppo,) = (ppo_cfg.parent / "runs" / "cart").iterdir()

        def fast_refusal(*args: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                start = time.perf_counter()
                try:
                    proc = self.cli(*args, timeout=60)
                except subprocess.TimeoutExpired:
                    return False, "still running after 60 s"
                ok, detail = self.one_line_exit_2(proc)
                return ok and time.perf_counter() - start < 20, detail

            return check

        bombed = Path(tempfile.mkdtemp(dir=self.work)) / "run"
        shutil.copytree(ppo, bombed)
        (bombed / "config.yml").write_text(
            (bombed / "config.yml").read_text() + "\n".join(lol) + "\n"
        )
        for args in (
            ("train", str(bomb), "--root", str(bomb.parent / "runs")),
            ("show", str(bomb)),
            ("show", str(bombed)),
            ("evaluate", str(bombed)),
        ):
            self.record("yaml bomb", f"9x9 billion laughs: {args[0]} {Path(args[1]).name}",
                        fast_refusal(*args))  # fmt: skip

        def symlinks() -> tuple[bool, str]:
            run = Path(tempfile.mkdtemp(dir=self.work)) / "run"
            shutil.copytree(ppo, run)
            names = ("curves.csv", "curves.png", "video.mp4", "robustness/shuffle.csv",
                     "robustness/shuffle.md", "robustness/shuffle.png")  # fmt: skip
            victims = {}
            for k, name in enumerate(names):
                victim = self.work / f"victim-{random.getrandbits(32)}-{k}"
                victim.write_text("precious")
                (run / name).parent.mkdir(exist_ok=True)
                (run / name).symlink_to(victim)
                victims[name] = victim
            elsewhere = self.work / f"elsewhere-{random.getrandbits(32)}"
            shutil.move(run / "checkpoints", elsewhere)  # checkpoints/ links out of the run
            (run / "checkpoints").symlink_to(elsewhere)
            kept = {f.name: f.read_bytes() for f in elsewhere.iterdir()}
            status = json.loads((run / "status.json").read_text())
            (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
            text = (run / "config.yml").read_text()  # 32 more steps for the resumed part
            (run / "config.yml").write_text(text.replace("n_timesteps: 64", "n_timesteps: 96"))
            codes = [
                self.cli(*args).returncode
                for args in (
                    ("plot", str(run)),
                    ("record", str(run), "--steps", "5"),
                    ("robustness", str(run), "--sweep", "shuffle", "--episodes", "1"),
                    ("train", "--resume", str(run), "--no-progress"),
                )
            ]
            hit = [n for n, v in victims.items() if v.read_text() != "precious"]
            if {f.name: f.read_bytes() for f in elsewhere.iterdir()} != kept:
                hit.append("checkpoints/")
            linked = [n for n in (*names, "checkpoints") if (run / n).is_symlink()]
            return codes == [0, 0, 0, 0] and not hit and not linked, (
                f"exits {codes}; targets overwritten: {hit or 'none'}; links left: "
                f"{linked or 'none'}"
            )

        self.record("symlink", "plot, record, robustness, resume of a folder of links", symlinks)

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = f"127.0.0.1:{sock.getsockname()[1]}"
        grid = {**PPO, "matrix": {"seed": [0, 1]}}
        ray_cfg = self.config("grid", {**grid, "ray_address": closed})
        self.record("ray", "config ray_address + --ray",
                    fast_refusal("train", str(ray_cfg), "--yes", "--ray"))  # fmt: skip
        plain = self.config("grid", grid)
        self.record("ray", f"--ray {closed} (closed port)",
                    fast_refusal("train", str(plain), "--yes", "--ray", closed))  # fmt: skip
        saved = self.env
        self.env = {**saved, "RAY_ADDRESS": closed}
        try:
            self.record("ray", "RAY_ADDRESS at a closed port",
                        fast_refusal("train", str(plain), "--yes", "--ray"))  # fmt: skip
        finally:
            self.env = saved

        for name, base, change in (
            ("population 1e7", CMAES, {"population": 10**7}),
            ("policy hidden 1e9", CMAES, {"policy_kwargs": {"hidden": 10**9}}),
            ("dqn batch_size 1e8", DQN, {"batch_size": 10**8, "policy_kwargs": {}}),
            ("ppo n_steps 1e9", PPO, {"n_steps": 10**9}),
        ):

            def memory(base: dict[str, Any] = base, change: dict[str, Any] = change) -> Any:
                config = self.config("big", {**base, **change})
                root = config.parent / "runs"
                ok, detail = fast_refusal("train", str(config), "--root", str(root))()
                return ok and "needs about" in detail and not root.exists(), detail

            self.record("memory", name, memory)

        def authors_folder(gin: str, write_npz: Callable[[Path], None]) -> Path:
            folder = Path(tempfile.mkdtemp(dir=self.work)) / "src"
            folder.mkdir()
            (folder / "config.gin").write_text(gin)
            write_npz(folder / "model.npz")
            return folder

        def imported(gin: str, write_npz: Callable[[Path], None]) -> Any:
            def check() -> tuple[bool, str]:
                source = authors_folder(gin, write_npz)
                out = source.parent / "run"
                ok, detail = fast_refusal("import", str(source), "--out", str(out))()
                return ok and not out.exists(), detail

            return check

        def zeros_npz(path: Path) -> None:
            import numpy as np

            np.savez(path, params=np.zeros(913))

        def npz_bomb(path: Path) -> None:  # 120M float64 zeros in under 1 MB
            import numpy as np

            with (
                zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
                archive.open("params.npy", "w", force_zip64=True) as fh,
            ):
                header = {"descr": "<f8", "fortran_order": False, "shape": (120_000_000,)}
                np.lib.format.write_array_header_1_0(fh, header)
                for _ in range(120):
                    fh.write(bytes(8_000_000))

        self.record("memory", "model.npz of 120M zeros (0.93 MB)", imported(PI_GIN, npz_bomb))
        for value in ("1000000000", "1e400"):
            gin = PI_GIN.replace("hidden_dim = 16", f"hidden_dim = {value}")

            def named(gin: str = gin) -> tuple[bool, str]:
                ok, detail = imported(gin, zeros_npz)()
                return ok and "config.gin" in detail and "hidden_dim" in detail, detail

            self.record("gin", f"imported hidden_dim = {value}", named)

    # -- issue 46, items 1-4: no code from an attribute path, a teacher pickle or an import ------

    def code_paths(self) -> None:
        """The ES classmethod loader (config, --set, --ray, a shared run folder), pickled BC
        teachers and statistics, and modules a config names (``this``, ``venv.__main__``, a
        module on PYTHONPATH whose top-level code writes a marker)."""
        loader = "stable_baselines3.common.policies:BasePolicy.load"

        def marker() -> Path:
            return self.work / f"m-{random.getrandbits(32)}"

        def refused(proc: Any, mark: Path, *absent: Path) -> tuple[bool, str]:
            ok, detail = self.one_line_exit_2(proc)
            gone = not mark.exists() and not any(p.exists() for p in absent)
            return ok and gone, detail + ("" if gone else "; marker or folder written!")

        es_body = {
            **CMAES, "n_generations": 2, "population": 4, "repeats": 1, "max_episode_steps": 5,
            "eval": {"freq": 0, "final_episodes": 2},
        }  # fmt: skip

        def es_loader(how: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                mark = marker()
                evil = self.work / f"evil-{random.getrandbits(32)}.pt"
                evil.write_bytes(payload(mark))
                body = dict(es_body)
                if how == "config":
                    body.update(policy=loader, policy_kwargs={"path": str(evil)})
                config = self.config("evil", body)
                root = config.parent / "runs"
                args = ["train", str(config), "--root", str(root), "--no-progress"]
                if how != "config":
                    args += ["--set", f"policy={loader}", f"policy_kwargs.path={evil}"]
                if how == "--ray":
                    args.append("--ray")
                return refused(self.cli(*args), mark, root)

            return check

        for how in ("config", "--set", "--ray"):
            self.record("code (46)", f"ES policy BasePolicy.load via {how}", es_loader(how))

        es_cfg = self.config("es", es_body)
        trained_es = self.cli("train", str(es_cfg), "--root", str(es_cfg.parent / "runs"))
        if trained_es.returncode != 0:
            self.record("code (46)", "train the ES run", lambda: (False, trained_es.stderr[-300:]))
            return
        (es_run,) = (es_cfg.parent / "runs" / "es").iterdir()

        def shared_folder(*args: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run, mark = Path(tempfile.mkdtemp(dir=self.work)) / "run", marker()
                shutil.copytree(es_run, run)
                (run / "best_model.pt").write_bytes(payload(mark))
                config = yaml.safe_load((run / "config.yml").read_text())
                next(iter(config.values())).update(
                    policy=loader, policy_kwargs={"path": str(run / "best_model.pt")}
                )
                (run / "config.yml").write_text(yaml.safe_dump(config))
                status = json.loads((run / "status.json").read_text())
                (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
                before = (run / "status.json").read_text()
                ok, detail = refused(self.cli(*args, str(run)), mark)
                same = (run / "status.json").read_text() == before
                return ok and same, detail + ("" if same else "; status.json rewritten")

            return check

        for args in (("evaluate",), ("maps",), ("train", "--resume")):
            name = f"shared ES run folder loading its own best_model.pt: {' '.join(args)}"
            self.record("code (46)", name, shared_folder(*args))

        ppo_cfg = self.config("cart", PPO)
        trained_ppo = self.cli("train", str(ppo_cfg), "--root", str(ppo_cfg.parent / "runs"))
        if trained_ppo.returncode != 0:
            self.record(
                "code (46)", "train the PPO run", lambda: (False, trained_ppo.stderr[-300:])
            )
            return
        (ppo,) = (ppo_cfg.parent / "runs" / "cart").iterdir()
        bc_body = {
            "algo": "bc", "env": "CartPole-v1", "teacher_algo": "ppo", "n_timesteps": 64,
            "policy_kwargs": {"net_arch": [8]}, "epochs": 1, "batch_size": 32,
            "eval": {"freq": 0, "final_episodes": 2},
        }  # fmt: skip

        def teacher_zip() -> tuple[bool, str]:
            mark, teacher = marker(), self.work / f"teacher-{random.getrandbits(32)}.zip"
            shutil.copy(ppo / "model.zip", teacher)
            with zipfile.ZipFile(teacher) as archive:
                entries = {n: archive.read(n) for n in archive.namelist()}
            data = json.loads(entries["data"])
            data["policy_class"][":serialized:"] = base64.b64encode(payload(mark)).decode()
            entries["data"] = json.dumps(data).encode()
            with zipfile.ZipFile(teacher, "w") as archive:
                for n, content in entries.items():
                    archive.writestr(n, content)
            config = self.config("bc", {**bc_body, "teacher": str(teacher)})
            root = config.parent / "runs"
            return refused(self.cli("train", str(config), "--root", str(root)), mark, root)

        self.record(
            "code (46)", "BC teacher: poisoned SB3 .zip without --trust-teacher", teacher_zip
        )

        def teacher_stats() -> tuple[bool, str]:
            mark, stats = marker(), self.work / f"vecnormalize-{random.getrandbits(32)}.pkl"
            stats.write_bytes(payload(mark))
            body = {
                **bc_body,
                "teacher": str(ppo / "model.zip"),
                "teacher_vecnormalize": str(stats),
            }
            config = self.config("bc", body)
            root = config.parent / "runs"
            trust = ("--trust-teacher", str(ppo / "model.zip"))  # the .zip only
            return refused(self.cli("train", str(config), "--root", str(root), *trust), mark, root)

        self.record("code (46)", "BC teacher_vecnormalize: a pickle, .zip trusted", teacher_stats)

        def side_effect_module(env: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                config = self.config("evil", {**PPO, "env": env})
                before = set(config.parent.iterdir())
                proc = subprocess.run(
                    [sys.executable, "-m", "zoo.cli", "train", config.name, "--no-progress"],
                    capture_output=True, text=True, env=self.env, timeout=600, cwd=config.parent,
                )  # fmt: skip
                ok, detail = self.one_line_exit_2(proc)
                quiet = not proc.stdout.strip() and set(config.parent.iterdir()) == before
                return ok and quiet, detail + ("" if quiet else "; output or files appeared!")

            return check

        for env in ("venv.__main__:CartPole-v1", "this:CartPole-v1"):
            self.record("code (46)", f"env {env}", side_effect_module(env))

        def module_on_path(change: dict[str, Any], allow: bool) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                mark, name = marker(), f"evil46_{random.getrandbits(32)}"
                folder = Path(tempfile.mkdtemp(dir=self.work))
                (folder / f"{name}.py").write_text(
                    f"import pathlib\npathlib.Path({str(mark)!r}).touch()\n"
                    "import gymnasium\nclass Wrap(gymnasium.Wrapper):\n    pass\n"
                )
                text = json.dumps({**PPO, **change}).replace("@", name)
                config = self.config("evil", json.loads(text))
                root = config.parent / "runs"
                args = ["train", str(config), "--root", str(root), "--no-progress"]
                path = os.pathsep.join(filter(None, [str(folder), self.env.get("PYTHONPATH")]))
                proc = subprocess.run(
                    [sys.executable, "-m", "zoo.cli", *args, *(["--allow-import", name] * allow)],
                    capture_output=True, text=True, timeout=600,
                    env={**self.env, "PYTHONPATH": path},
                )  # fmt: skip
                if allow:  # the person running named it: imported (the marker), trained
                    return proc.returncode == 0 and mark.exists(), f"exit {proc.returncode}"
                return refused(proc, mark, root)

            return check

        for label, change in (("env @:CartPole-v1", {"env": "@:CartPole-v1"}),
                              ("env_wrapper @:Wrap", {"env_wrapper": ["@:Wrap"]})):  # fmt: skip
            self.record(
                "code (46)", f"module on PYTHONPATH, {label}", module_on_path(change, False)
            )
        self.record(
            "code (46)", "module on PYTHONPATH with --allow-import: imported",
            module_on_path({"env": "@:CartPole-v1"}, True),
        )  # fmt: skip

    # -- issue 46, faults (items 9-11): kept apart from the probes above --------------------

    def faults_46(self) -> None:
        """Ctrl-C inside an SB3 evaluation, a full disk at start, signals at a run's edges and
        a refused ``--resume``; signals are timed on the run's progress lines."""
        for signals in (1, 2):
            self.record(
                "fault 46", f"SB3 {signals}x SIGINT inside an evaluation, --resume",
                lambda signals=signals: self._sigint_in_evaluation(signals),
            )  # fmt: skip
        for where in ("root", "run-dir"):
            self.record(
                "fault 46", f"full disk at start ({where}), then the same command",
                lambda where=where: self._full_disk_at_start(where),
            )  # fmt: skip
        self.record("fault 46", "--run-dir over a dead start's run.lock", self._dead_start)
        self.record("fault 46", "SIGTERM before any run folder", self._sigterm_before_folder)
        self.record("fault 46", "CMA-ES second SIGINT while exiting", self._cmaes_double_sigint)
        for algo in ("ppo", "cmaes"):
            self.record(
                "fault 46", f"refused --resume ({algo}) leaves the folder byte-identical",
                lambda algo=algo: self._refused_resume(algo),
            )  # fmt: skip

    def _lines(self, *args: str) -> Lines46:
        return Lines46(
            [sys.executable, "-m", "zoo.cli", "train", *args, "--progress-every", "1e-9"], self.env
        )

    def _sigint_in_evaluation(self, signals: int) -> tuple[bool, str]:
        body = {  # MountainCar: every evaluation episode is 200 steps, so it takes seconds
            **DQN, "env": "MountainCar-v0", "n_timesteps": 320, "learning_starts": 50,
            "buffer_size": 1000, "save_freq": 100,
            "eval": {"freq": 300, "n_episodes": 30, "final_episodes": 1},
        }  # fmt: skip
        config = self.config("slow", body)
        run = config.parent / "run"
        job = self._lines(str(config), "--run-dir", str(run))
        job.wait(lambda: job.step >= 299)
        job.wait_quiet(0.5)  # inside the evaluation of step 300
        for i in range(signals):
            time.sleep(0.01 * i)
            job.proc.send_signal(signal.SIGINT)
        code = job.finish()
        inside = not (run / "evaluations.json").exists()
        resumed = self.cli("train", "--resume", str(run), "--no-progress")
        with (run / "metrics.csv").open() as fh:
            at_300 = [r.split(",")[2] for r in fh if r.startswith("300,")]
        want = {"train/loss", "train/n_updates", "train/learning_rate", "rollout/exploration_rate"}
        missing = sorted(want - set(at_300))
        twice = len(at_300) != len(set(at_300))
        ok = code == 130 and inside and resumed.returncode == 0 and not missing and not twice
        return ok, (
            f"exit {code}, inside the evaluation: {inside}, resume exit {resumed.returncode}, "
            f"step-300 row missing {missing or 'nothing'}, a value twice: {twice}"
        )

    def _full_disk_at_start(self, where: str) -> tuple[bool, str]:
        config = self.config("cart", PPO)
        target = ["--root", str(config.parent / "runs")]
        if where == "run-dir":
            (config.parent / "run").mkdir()
            target = ["--run-dir", str(config.parent / "run")]
        argv = ("train", str(config), *target, "--no-progress")
        cut = self.cli(*argv, limit_bytes=200)  # run.lock fits, config.yml does not
        left = sorted(
            str(p.relative_to(config.parent))
            for p in config.parent.rglob("*")
            if p.is_file() and p != config
        )
        again = self.cli(*argv)
        ok = cut.returncode != 0 and not left and again.returncode == 0
        return (
            ok,
            f"cut exit {cut.returncode}, left {left or 'nothing'}, again exit {again.returncode}",
        )

    def _dead_start(self) -> tuple[bool, str]:
        config = self.config("cart", PPO)
        run = config.parent / "run"
        run.mkdir()
        code = (
            f"from zoo.run_lock import RunLock; import os; RunLock({str(run)!r}).acquire(); "
            f"os.kill(os.getpid(), {int(signal.SIGKILL)})"
        )
        subprocess.run([sys.executable, "-c", code], env=self.env, check=False)
        again = self.cli("train", str(config), "--run-dir", str(run), "--no-progress")
        return again.returncode == 0, f"exit {again.returncode} {again.stderr.strip()[-150:]}"

    def _sigterm_before_folder(self) -> tuple[bool, str]:
        config = self.config("cart", PPO)
        root = config.parent / "runs"
        job = self._lines(str(config), "--root", str(root))
        job.wait(lambda: b", 1 run of" in job.out)
        job.proc.send_signal(signal.SIGTERM)
        code = job.finish()
        err = job.err.decode(errors="replace")
        folders = list(root.rglob("config.yml"))
        ok = code == 130 and not folders and "--resume" not in err and "checkpoint" not in err
        return ok, f"exit {code}, run folders {len(folders)}: {err.strip()[-120:]}"

    def _cmaes_double_sigint(self) -> tuple[bool, str]:
        config = self.config("es", {**CMAES, "n_generations": 1000})
        job = self._lines(str(config), "--root", str(config.parent / "runs"))
        job.wait(lambda: job.step >= 2)
        job.proc.send_signal(signal.SIGINT)
        job.wait(lambda: b"interrupted:" in job.err)
        time.sleep(0.02)  # the process is shutting down
        job.proc.send_signal(signal.SIGINT)
        code = job.finish()
        return code == 130, f"exit {code}"

    def _refused_resume(self, algo: str) -> tuple[bool, str]:
        marker = self.work / f"m-{random.getrandbits(32)}"
        body = (
            {**PPO, "n_timesteps": 100_000} if algo == "ppo" else {**CMAES, "n_generations": 1000}
        )
        config = self.config("cut", body)
        job = self._lines(str(config), "--root", str(config.parent / "runs"))
        job.wait(lambda: job.step >= (200 if algo == "ppo" else 2))
        job.proc.send_signal(signal.SIGINT)
        job.finish()
        (run,) = (config.parent / "runs" / "cut").iterdir()
        if algo == "ppo":
            (run / "checkpoints" / "last_vecnormalize.pkl").write_bytes(payload(marker))
        else:
            (state,) = (run / "checkpoints").glob("cma_state-*.npz")
            state.write_bytes(numpy_bypass(marker))

        def snapshot() -> dict[str, bytes]:
            return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}

        before = snapshot()
        refused = self.cli("train", "--resume", str(run), "--no-progress")
        after = snapshot()
        changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
        ok, detail = self.one_line_exit_2(refused)
        return (
            ok and not changed and not marker.exists(),
            f"{detail}; changed: {changed or 'nothing'}",
        )

    # -- issue 68, the third pass: a run folder's .git, names, links, writers, injection, bombs

    def ppo_copies(self) -> Callable[[], Path]:
        """Train a small PPO CartPole run once; a function that returns a fresh copy of it."""
        ppo_cfg = self.config("cart", PPO)
        root = ppo_cfg.parent / "runs"
        self.cli("train", str(ppo_cfg), "--root", str(root), "--no-progress")
        (ppo,) = (root / "cart").iterdir()

        def copy() -> Path:
            target = Path(tempfile.mkdtemp(dir=self.work)) / "run"
            shutil.copytree(ppo, target)
            return target

        return copy

    def pass_68(self) -> None:
        """A shared run folder's own ``.git`` (``core.fsmonitor``), experiment names that
        leave ``--root``, a linked ``logs/``, ``report/`` or ``robustness/``, a wrapper
        writing where its arguments say, an ``eval.json`` injecting into Markdown, deflate
        bombs in ``last.zip`` and ``best_model.pt``, and JSON nested 100k deep."""
        copy = self.ppo_copies()

        def git(*args: str) -> None:
            subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                           check=True, capture_output=True, timeout=60)  # fmt: skip

        def fsmonitor(*args: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run, mark = copy(), self.work / f"m-{random.getrandbits(32)}"
                git("init", "-q", str(run))
                git("-C", str(run), "add", ".")
                git("-C", str(run), "commit", "-qm", "run")
                git("-C", str(run), "config", "core.fsmonitor", f"touch {mark}")
                proc = self.cli(*args[:1], str(run), *args[1:])
                return not mark.exists(), f"exit {proc.returncode}, marker: {mark.exists()}"

            return check

        for args in (("robustness", "--sweep", "shuffle", "--episodes", "1"), ("record",
                     "--steps", "3")):  # fmt: skip
            self.record("pass 68", f"run folder's own .git fsmonitor: {args[0]}", fsmonitor(*args))

        for name in ("../../../x", "/ABS", "x" * 300, "naïve"):

            def named(name: str = name) -> tuple[bool, str]:
                folder = Path(tempfile.mkdtemp(dir=self.work)) / "a" / "b"
                folder.mkdir(parents=True)
                key = str(self.work / f"abs-{random.getrandbits(32)}") if name == "/ABS" else name
                config = folder / "evil.yml"
                config.write_text(yaml.safe_dump({key: PPO}))
                before = sorted(self.work.rglob("*"))
                proc = self.cli("train", str(config), "--root", str(folder / "runs"))
                ok, detail = self.one_line_exit_2(proc)
                quiet = sorted(self.work.rglob("*")) == before
                return ok and quiet, detail + ("" if quiet else "; files written!")

            self.record("pass 68", f"experiment name {name[:20]!r}", named)

        def linked(sub: str, *args: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run = copy()
                victim = self.work / f"victim-{random.getrandbits(32)}"
                (victim / "part1").mkdir(parents=True)
                (victim / "part1" / "progress.csv").write_text("precious")
                (victim / "summary.md").write_text("precious")
                (victim / "shuffle.md").write_text("precious")
                shutil.rmtree(run / sub, ignore_errors=True)
                (run / sub).symlink_to(victim)
                if args[0] == "train":
                    status = json.loads((run / "status.json").read_text())
                    (run / "status.json").write_text(json.dumps({**status, "state": "x"}))
                    text = (run / "config.yml").read_text()
                    (run / "config.yml").write_text(
                        text.replace("n_timesteps: 64", "n_timesteps: 96")
                    )
                    status["state"] = "interrupted"
                    (run / "status.json").write_text(json.dumps(status))
                argv = [a.replace("RUN", str(run)) for a in args]
                proc = self.cli(*argv)
                files = sorted(p.name for p in victim.rglob("*") if p.is_file())
                kept = files == ["progress.csv", "shuffle.md", "summary.md"] and all(
                    p.read_text() == "precious" for p in victim.rglob("*") if p.is_file()
                )
                return proc.returncode == 0 and kept, f"exit {proc.returncode}, target kept: {kept}"

            return check

        self.record("pass 68", "train --resume through a linked logs/",
                    linked("logs", "train", "--resume", "RUN", "--no-progress"))  # fmt: skip
        self.record("pass 68", "robustness through a linked robustness/",
                    linked("robustness", "robustness", "RUN", "--sweep", "shuffle",
                           "--episodes", "1"))  # fmt: skip
        self.record("pass 68", "report FOLDER through a linked report/",
                    linked("report", "report", "E3", "RUN", "--no-plot"))  # fmt: skip

        def writer() -> tuple[bool, str]:
            elsewhere = self.work / f"videos-{random.getrandbits(32)}"
            body = {**PPO, "env_kwargs": {"render_mode": "rgb_array"}, "env_wrapper": [
                {"gymnasium.wrappers:RecordVideo": {"video_folder": str(elsewhere)}}]}  # fmt: skip
            config = self.config("evil", body)
            ok, detail = self.one_line_exit_2(
                self.cli("train", str(config), "--root", str(config.parent / "r"))
            )
            return ok and not elsewhere.exists(), detail

        self.record("pass 68", "env_wrapper RecordVideo video_folder elsewhere", writer)

        def injected(change: dict[str, Any]) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run = copy()
                result = json.loads((run / "eval.json").read_text())
                entry = next(iter(result["policies"].values()))
                entry.update(change)
                (run / "eval.json").write_text(json.dumps(result))
                proc = self.cli("report", "E3", str(run), "--no-plot")
                ok, detail = self.one_line_exit_2(proc)
                return ok and not (run / "report").exists(), detail

            return check

        for label, change in (
            ("n_episodes <script>", {"n_episodes": "<script>x</script><!-- report: x -->"}),
            ("mean_reward 'abc'", {"mean_reward": "abc"}),
            ("mean_reward null", {"mean_reward": None}),
            ("mean_reward NaN", {"mean_reward": float("nan")}),
        ):
            self.record("pass 68", f"eval.json {label} on report", injected(change))

        def deep(name: str, *args: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run = copy()
                (run / name).write_text("[" * 100_000 + "]" * 100_000)
                argv = [a.replace("RUN", str(run)) for a in args]
                return self.one_line_exit_2(self.cli(*argv))

            return check

        self.record(
            "pass 68", "status.json 100k deep on evaluate", deep("status.json", "evaluate", "RUN")
        )
        self.record("pass 68", "eval.json 100k deep on report",
                    deep("eval.json", "report", "E3", "RUN", "--no-plot"))  # fmt: skip

        def bomb_checkpoint() -> tuple[bool, str]:
            run = copy()
            last = run / "checkpoints" / "last.zip"
            with zipfile.ZipFile(last) as archive:
                entries = {n: archive.read(n) for n in archive.namelist()}
            entries["data"] = entries["data"][:-1] + b', "pad": "' + b" " * 2**27 + b'"}'
            with zipfile.ZipFile(last, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
                for n, raw in entries.items():
                    archive.writestr(n, raw)
            status = json.loads((run / "status.json").read_text())
            (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
            ok, detail = self.one_line_exit_2(self.cli("train", "--resume", str(run)))
            return ok and "declares" in detail, f"{last.stat().st_size:,} bytes: {detail}"

        self.record("pass 68", "last.zip whose data inflates to 128 MB", bomb_checkpoint)

        def bomb_model() -> tuple[bool, str]:
            run = copy()
            with zipfile.ZipFile(run / "model.zip") as archive:
                entries = {n: archive.read(n) for n in archive.namelist()}
            import io

            import torch

            buffer = io.BytesIO()
            torch.save({"w": torch.zeros(2**25)}, buffer)  # 128 MB of zeros
            entries["policy.pth"] = buffer.getvalue()
            with zipfile.ZipFile(run / "model.zip", "w", zipfile.ZIP_DEFLATED) as archive:
                for n, raw in entries.items():
                    archive.writestr(n, raw)
            ok, detail = self.one_line_exit_2(self.cli("evaluate", str(run), "--which", "last"))
            return ok and "declares" in detail, detail

        self.record("pass 68", "model.zip whose policy.pth inflates to 128 MB", bomb_model)

        def es_hidden() -> tuple[bool, str]:
            body = {**CMAES, "policy_kwargs": {"hidden": [1_000_000, 1_000_000]}}
            config = self.config("es", body)
            root = config.parent / "runs"
            ok, detail = self.one_line_exit_2(self.cli("train", str(config), "--root", str(root)))
            return ok and not root.exists(), detail

        self.record("pass 68", "ES policy hidden [1000000, 1000000]", es_hidden)

    # -- issue 68, not yet probed: resume races, kills and full disks in report, robustness
    # and import, hostile trust/import flags, links in --restore and recipe stages, 1 GB lines

    def pass_68b(self) -> None:
        """Two ``train --resume`` of one folder at once; SIGKILL and SIGTERM inside
        ``report``, ``robustness`` and ``import``; a full disk (``RLIMIT_FSIZE``) in ``import``
        and ``report``; hostile ``--trust-teacher``, ``--allow-import`` and
        ``ATTN_ZOO_ALLOW_IMPORT``; links and traversal in ``import --restore`` and a recipe's
        ``stages/``; a 1 GB line in ``metrics.csv``."""
        cat = "pass 68b"
        copy = self.ppo_copies()

        def snapshot(folder: Path) -> dict[str, bytes]:
            return {
                str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()
            }

        def two_resumes() -> tuple[bool, str]:
            dqn = self.config("dqn", {**DQN, "n_timesteps": 100_000})
            out = dqn.parent / "runs"
            first = self.spawn("train", str(dqn), "--root", str(out), "--no-progress")
            while not list(out.glob("dqn/*/checkpoints/last.zip")):
                time.sleep(0.02)
            first.send_signal(signal.SIGINT)
            first.wait()
            (run,) = (out / "dqn").iterdir()
            procs = [self.spawn("train", "--resume", str(run), "--no-progress") for _ in range(2)]
            deadline = time.monotonic() + 60
            while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.05)
            done = [p for p in procs if p.poll() is not None]
            live = [p for p in procs if p.poll() is None]
            errs = [p.stderr.read() if p.stderr else "" for p in done]
            for p in live:
                p.send_signal(signal.SIGKILL)
                p.wait()
            lines = [line for e in errs for line in e.splitlines() if line.strip()]
            ok = (
                len(done) == 1
                and done[0].returncode == 2
                and len(lines) == 1
                and "in use by process" in lines[0]
            )
            codes = [p.returncode for p in done]
            return ok, f"first to end exits {codes}: {lines[-1][:150] if lines else '-'}"

        self.record(cat, "two train --resume of one folder at once", two_resumes)

        def authors_folder() -> Path:
            import numpy as np

            folder = Path(tempfile.mkdtemp(dir=self.work)) / "src"
            folder.mkdir()
            (folder / "config.gin").write_text(PI_GIN)
            rng = np.random.default_rng(0)
            np.savez(folder / "model.npz", params=rng.normal(size=913) * 0.1)
            return folder

        def killed(command: str, how: signal.Signals) -> Callable[[], tuple[bool, str]]:
            """``command`` killed at a spread of moments: each time the outputs of the last
            whole run stay byte for byte (or are the next whole run's), nothing else is left
            (SIGKILL: at most a hidden temporary file), and the command then runs to the end."""

            def check() -> tuple[bool, str]:
                run = copy()
                if command == "import":
                    source = authors_folder()
                    out = run.parent / "imported"
                    argv = ["import", str(source), "--out", str(out)]
                    watch = out
                elif command == "report":
                    argv, watch = ["report", "E3", str(run), "--no-plot"], run / "report"
                else:
                    argv = ["robustness", str(run), "--sweep", "shuffle", "--episodes", "1"]
                    watch = run / "robustness"
                whole = self.cli(*argv)
                if whole.returncode != 0:
                    return False, f"whole run exit {whole.returncode}: {whole.stderr[-150:]}"
                before = snapshot(watch)
                if command == "import":
                    shutil.rmtree(out)
                took = max(0.5, float(whole_seconds.get(command, 3.0)))
                bad: list[str] = []
                for k in range(6):
                    delay = took * (0.15 + 0.15 * k)
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "zoo.cli", *argv], env=self.env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                    )  # fmt: skip
                    if command == "import":  # its writes take milliseconds: time on them
                        delay = (0, 0.002, 0.005, 0.01, 0.03, 0.1)[k]
                        while proc.poll() is None and not any(
                            p.name.lstrip(".").startswith("imported") for p in out.parent.iterdir()
                        ):
                            time.sleep(0.0005)
                    time.sleep(delay)
                    proc.send_signal(how)
                    proc.communicate(timeout=120)
                    after = snapshot(watch) if watch.exists() else {}
                    if command == "import":
                        # a cut import leaves no folder or a whole one
                        whole_now = after.keys() >= before.keys() - {"command.txt"}
                        if after and not whole_now:
                            bad.append(f"{delay:.1f}s: half folder {sorted(after)}")
                        if watch.exists():
                            shutil.rmtree(watch)
                        stray = [
                            p.name
                            for p in watch.parent.iterdir()
                            if p.name != "run"
                            and not (how == signal.SIGKILL and p.name.startswith("."))
                        ]
                        if stray:
                            bad.append(f"{delay:.1f}s: left {stray}")
                        continue
                    for name in sorted(set(before) | set(after)):
                        hidden = Path(name).name.startswith(".")
                        if name not in before and not (hidden and how == signal.SIGKILL):
                            bad.append(f"{delay:.1f}s: new {name}")
                        elif name in before and after.get(name) != before[name]:
                            bad.append(f"{delay:.1f}s: {name} changed or gone")
                again = self.cli(*argv)
                ok = not bad and again.returncode == 0
                return (
                    ok,
                    f"{'; '.join(bad[:3]) or 'outputs intact'}; again exit {again.returncode}",
                )

            return check

        whole_seconds: dict[str, float] = {}
        for command, argv in (
            ("report", ["report", "E3", str(copy()), "--no-plot"]),
            ("robustness", ["robustness", str(copy()), "--sweep", "shuffle", "--episodes", "1"]),
        ):
            start = time.perf_counter()
            self.cli(*argv)
            whole_seconds[command] = time.perf_counter() - start
        start = time.perf_counter()
        src = authors_folder()
        self.cli("import", str(src), "--out", str(src.parent / "o"))
        whole_seconds["import"] = time.perf_counter() - start
        for command in ("report", "robustness", "import"):
            for how in (signal.SIGKILL, signal.SIGTERM):
                self.record(cat, f"{how.name} inside {command}", killed(command, how))

        def full_disk(command: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run = copy()
                if command == "import":
                    source = authors_folder()
                    out = run.parent / "imported"
                    argv, watch = ["import", str(source), "--out", str(out)], out
                    before: dict[str, bytes] = {}
                else:
                    argv, watch = ["report", "E3", str(run), "--no-plot"], run / "report"
                    self.cli(*argv)
                    before = snapshot(watch)
                    status = json.loads((run / "eval.json").read_text())
                    entry = next(iter(status["policies"].values()))
                    entry["mean_reward"] = 12.5  # the next report differs
                    (run / "eval.json").write_text(json.dumps(status))
                # an import's config.yml (862 bytes) fits, its model.pt (7.5 kB) does not
                limited = self.cli(*argv, limit_bytes=2000 if command == "import" else 300)
                ok, detail = self.one_line_exit_2(limited)
                after = snapshot(watch) if watch.exists() else {}
                kept = after == before and (command != "import" or not watch.exists())
                kept = kept and not [p for p in watch.parent.iterdir() if ".tmp" in p.name]
                again = self.cli(*argv)
                return (
                    ok and kept and again.returncode == 0,
                    f"{detail}; previous outputs kept: {kept}; again exit {again.returncode}",
                )

            return check

        for command in ("import", "report"):
            self.record(cat, f"full disk (RLIMIT_FSIZE) during {command}", full_disk(command))

        def flag(label: str, *args: str, env: dict[str, str] | None = None) -> None:
            def check() -> tuple[bool, str]:
                run = copy()
                status = json.loads((run / "status.json").read_text())
                (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
                before = snapshot(run)
                saved = self.env
                self.env = {**saved, **(env or {})}
                try:
                    proc = self.cli(*[a.replace("RUN", str(run)) for a in args])
                finally:
                    self.env = saved
                ok, detail = self.one_line_exit_2(proc)
                same = snapshot(run) == before
                return ok and same, detail + ("" if same else "; folder changed!")

            self.record(cat, label, check)

        resume = ("train", "--resume", "RUN", "--no-progress")
        flag("--allow-import 'os;touch x'", *resume, "--allow-import", "os;touch x")
        flag("--allow-import ''", *resume, "--allow-import", "")
        flag("--allow-import ../../x", *resume, "--allow-import", "../../x")
        flag("--allow-import __main__ with a config naming it", "train", str(self.config(
            "m", {**PPO, "policy": "__main__:MlpPolicy"})), "--root", "RUN/r",
            "--allow-import", "__main__")  # fmt: skip
        for value in ("os;touch x", "../../x", "a,,b c", "x" * 5000):
            flag(f"ATTN_ZOO_ALLOW_IMPORT={value[:20]!r}", *resume,
                 env={"ATTN_ZOO_ALLOW_IMPORT": value})  # fmt: skip
        flag("--trust-teacher of a missing file", *resume, "--trust-teacher", "/no/such.zip")
        flag("--trust-teacher of a folder (/)", *resume, "--trust-teacher", "/")
        flag("--trust-teacher ''", *resume, "--trust-teacher", "")

        def restore(change: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                source = authors_folder()
                run = source.parent / "imported"
                made = self.cli("import", str(source), "--out", str(run))
                if made.returncode != 0:
                    return False, f"import exit {made.returncode}: {made.stderr[-150:]}"
                (run / "model.pt").unlink()
                victim = self.work / f"victim-{random.getrandbits(32)}"
                victim.mkdir()
                (victim / "model.pt").write_text("precious")
                if change == "model.pt":  # a link to a file that does not exist yet
                    (run / "model.pt").symlink_to(victim / "new.pt")
                    proc = self.cli("import", str(source), "--restore", str(run))
                    ok = proc.returncode == 0 and not (victim / "new.pt").exists()
                    ok = ok and not (run / "model.pt").is_symlink()
                    return ok, f"exit {proc.returncode}, victim untouched: {ok}"
                if change == "../ folder":
                    target = f"{run}/../../{victim.name}"
                    proc = self.cli("import", str(source), "--restore", target)
                    ok, detail = self.one_line_exit_2(proc)
                    return ok and (victim / "model.pt").read_text() == "precious", detail
                # provenance.json linked to a huge file elsewhere
                big = self.work / f"big-{random.getrandbits(32)}.json"
                with big.open("wb") as fh:
                    fh.truncate(2**30)
                (run / "provenance.json").unlink()
                (run / "provenance.json").symlink_to(big)
                start = time.perf_counter()
                proc = self.cli("import", str(source), "--restore", str(run))
                took = time.perf_counter() - start
                ok, detail = self.one_line_exit_2(proc)
                return ok and took < 30, f"{detail} ({took:.1f} s)"

            return check

        for change in ("model.pt", "../ folder", "provenance.json"):
            self.record(cat, f"import --restore with a linked or traversing {change}",
                        restore(change))  # fmt: skip

        def recipe_stages(linked: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                stage = self.config("tiny", {**PPO, "n_timesteps": 32})
                body = {"algo": "recipe", "env": "CartPole-v1", "stages": [
                    {"name": "a", "experiment": str(stage)},
                    {"name": "b", "experiment": str(stage), "init": None}],
                    "eval": {"final_episodes": 1}}  # fmt: skip
                config = self.config("rec", body)
                runs = config.parent / "runs"
                self.cli("train", str(config), "--root", str(runs), "--no-progress")
                (run,) = (runs / "rec").iterdir()
                victim = self.work / f"victim-{random.getrandbits(32)}"
                if linked == "stages/":
                    shutil.copytree(run / "stages", victim)
                    shutil.rmtree(run / "stages")
                    (run / "stages").symlink_to(victim)
                    shutil.rmtree(victim / "2_b")
                else:
                    shutil.copytree(run / "stages" / "2_b", victim)
                    shutil.rmtree(run / "stages" / "2_b")
                    (run / "stages" / "2_b").symlink_to(victim)
                    status = json.loads((victim / "status.json").read_text())
                    (victim / "status.json").write_text(
                        json.dumps({**status, "state": "interrupted"})
                    )
                status = json.loads((run / "status.json").read_text())
                (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
                before = snapshot(victim)
                proc = self.cli("train", "--resume", str(run), "--no-progress")
                kept = snapshot(victim) == before
                return (
                    kept,
                    f"exit {proc.returncode}: {proc.stderr.strip()[-120:]}; target kept: {kept}",
                )

            return check

        for linked in ("stages/", "stages/2_b"):
            self.record(cat, f"recipe train --resume through a linked {linked}",
                        recipe_stages(linked))  # fmt: skip

        def long_line(*args: str) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                run = copy()
                header = (run / "metrics.csv").read_text().splitlines()[0]
                with (run / "metrics.csv").open("w") as fh:
                    fh.write(header + "\n1,0.5,episode_return,")
                    fh.truncate(2**30)  # a 1 GB line (sparse: no disk used)
                start = time.perf_counter()
                proc = self.cli(*[a.replace("RUN", str(run)) for a in args], timeout=120)
                took = time.perf_counter() - start
                ok, detail = self.one_line_exit_2(proc)
                return ok and took < 20, f"{detail} ({took:.1f} s)"

            return check

        self.record(cat, "metrics.csv 1 GB line on report",
                    long_line("report", "E3", "RUN", "--no-plot"))  # fmt: skip
        self.record(cat, "metrics.csv 1 GB line on plot", long_line("plot", "RUN"))


class Lines46:
    """A train process whose stdout (progress lines) and stderr are read as they come."""

    STEP = re.compile(rb"^\[[^\]]*\] ([\d,]+)/[\d,]+ ", re.MULTILINE)

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.out, self.err, self.step = b"", b"", -1

    def read(self, timeout: float) -> bool:
        streams = [s for s in (self.proc.stdout, self.proc.stderr) if s and not s.closed]
        ready = select.select(streams, [], [], timeout)[0] if streams else []
        got = False
        for stream in ready:
            chunk = os.read(stream.fileno(), 1 << 16)
            if not chunk:
                stream.close()
            elif stream is self.proc.stderr:
                self.err, got = self.err + chunk, True
            else:
                self.out, got = self.out + chunk, True
                steps = [int(m.replace(b",", b"")) for m in self.STEP.findall(chunk)]
                self.step = max([self.step, *steps])
        return got

    def wait(self, done: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline or (not self.read(0.2) and self.proc.poll() is not None):
                raise RuntimeError(f"the awaited line never came: {self.out[-200:]!r}")

    def wait_quiet(self, seconds: float) -> None:
        """Until no line came for ``seconds`` (with a line every step: inside a long call)."""
        while self.read(seconds):
            pass

    def finish(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None or self.read(0):
            if time.monotonic() > deadline:
                self.proc.kill()
            self.read(0.2)
        return self.proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/break_it.json")
    parser.add_argument("--trials", type=int, default=3, help="kill trials per kind")
    parser.add_argument("--only", nargs="*", help="categories to run (default all)")
    args = parser.parse_args()
    random.seed(0)
    work = Path(tempfile.mkdtemp(prefix="break_it-"))
    prober = Prober(work)
    steps = {
        "configs": prober.bad_configs,
        "callables": prober.callables,
        "artefacts": prober.artefacts,
        "kills": lambda: prober.kills(args.trials),
        "concurrency": prober.concurrency,
        "disk": prober.disk_full,
        "code46": prober.code_paths,
        "faults46": prober.faults_46,
        "dos": prober.dos,  # issue 46 items 5-8, 11 (gin)
        "pass68": prober.pass_68,  # issue 68: .git, names, links, writers, injection, bombs
        "pass68b": prober.pass_68b,  # issue 68, not yet probed: races, kills, full disks, flags
    }
    start = time.perf_counter()
    try:
        for name, step in steps.items():
            if not args.only or name in args.only:
                step()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.only and Path(args.out).is_file():  # a partial run refreshes its own probes only
        ran = {r["category"] for r in prober.results}
        kept = [r for r in json.loads(Path(args.out).read_text())["results"]
                if r["category"] not in ran]  # fmt: skip
        prober.results = kept + prober.results
    failed = [r for r in prober.results if not r["ok"]]
    summary = {
        "probes": len(prober.results),
        "failed": len(failed),
        "seconds": round(time.perf_counter() - start, 1),
        "results": prober.results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"{len(prober.results) - len(failed)}/{len(prober.results)} probes hold; see {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
