"""attn_policies.safe_reads: the algorithms' own checkpoint readers (CMA-ES, DAgger, APG) go
through the same size and nesting checks as the zoo's (issue 68): a deflate bomb or JSON
nested 100k deep in a checkpoint folder is one error naming the file, before anything is
inflated or parsed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch

from attn_envs.envs.cartpole_swingup_torch import CartPoleHoldTask
from attn_envs.envs.cartpole_swingup_vector import CartPoleSwingUpVectorEnv
from attn_policies.algorithms.apg import APGConfig, APGTrainer
from attn_policies.algorithms.cmaes import CMAESConfig, CMAESTrainer
from attn_policies.algorithms.cmaes_state import StateFormatError
from attn_policies.algorithms.dagger import DAgger, DAggerConfig
from attn_policies.algorithms.es_eval import BatchedEvaluator, PolicyFactory, RolloutSpec
from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy
from attn_policies.safe_reads import UnsafeFileError, load_tensors, read_lines

DEEP = "[" * 100_000 + "]" * 100_000


def bomb(file: Path) -> None:
    """Add to the zip ``file`` a deflated entry of 16 MiB of zeros (16 kB on disk)."""
    with zipfile.ZipFile(file) as archive:
        entries = {n: archive.read(n) for n in archive.namelist()}
    prefix = next(iter(entries)).split("/")[0]
    entries[f"{prefix}/data/999"] = bytes(2**24)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, raw in entries.items():
            archive.writestr(name, raw)


def test_load_tensors_refuses_a_deflate_bomb_and_reads_a_real_file(tmp_path: Path) -> None:
    file = tmp_path / "w.pt"
    torch.save({"w": torch.arange(3.0)}, file)
    assert torch.equal(load_tensors(file)["w"], torch.arange(3.0))
    bomb(file)
    with pytest.raises(UnsafeFileError, match="zip bomb"):
        load_tensors(file)


def test_read_lines_refuses_a_1_gb_line_without_reading_it(tmp_path: Path) -> None:
    file = tmp_path / "metrics.csv"
    with file.open("w") as fh:
        fh.write("step,wall_time,metric,value\n1,0.5,episode_return,")
        fh.truncate(2**30)  # sparse: the line is 1 GB long
    with pytest.raises(UnsafeFileError, match="line 2 is longer than"):
        read_lines(file)


def apg() -> APGTrainer:
    torch.manual_seed(0)
    config = APGConfig(batch_size=16, window=10, episode_steps=50)
    return APGTrainer(FNNPolicy(5, 1, hidden=8), CartPoleHoldTask(), config)


def test_apg_restore_refuses_a_bomb_and_deep_json(tmp_path: Path) -> None:
    trainer = apg()
    for _ in range(5):  # one whole episode: saves come between episodes
        trainer.step()
    trainer.save(tmp_path)
    text = (tmp_path / "trainer.json").read_text()
    (tmp_path / "trainer.json").write_text(DEEP)
    with pytest.raises(UnsafeFileError, match="nested more than 100"):
        apg().restore(tmp_path)
    (tmp_path / "trainer.json").write_text(text)
    bomb(tmp_path / "apg.pt")
    with pytest.raises(UnsafeFileError, match="zip bomb"):
        apg().restore(tmp_path)


def dagger() -> DAgger:
    torch.manual_seed(0)
    return DAgger(
        AttentionNeuronPolicy.cartpole(),
        FNNPolicy(5, 1, 8),
        lambda n: CartPoleSwingUpVectorEnv(n, harder=True, max_episode_steps=1000),
        DAggerConfig(n_envs=2, max_steps=20, window=8, seed=3),
    )


@pytest.mark.parametrize("target", ["trainer.json", "student-1.pt", "round-1.npz"])
def test_dagger_restore_refuses_a_bomb_and_deep_json(tmp_path: Path, target: str) -> None:
    trainer = dagger()
    trainer.step()
    trainer.save(tmp_path)
    if target == "trainer.json":
        (tmp_path / target).write_text(DEEP)
    elif target.endswith(".pt"):
        bomb(tmp_path / target)
    else:
        _npz_bomb(tmp_path / target)
    with pytest.raises(UnsafeFileError, match=r"nested more than 100|zip bomb"):
        dagger().restore(tmp_path)


def _npz_bomb(file: Path) -> None:
    with zipfile.ZipFile(file) as archive:
        entries = {n: archive.read(n) for n in archive.namelist()}
    entries["pad.npy"] = bytes(2**24)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, raw in entries.items():
            archive.writestr(name, raw)


def cmaes() -> CMAESTrainer:
    spec = RolloutSpec(
        PolicyFactory("attn_policies.es_policies:AttentionNeuronPolicy.cartpole"),
        env_id="attn_envs:attn_envs/CartPoleSwingUpHarder-v0",
        max_steps=10,
    )
    return CMAESTrainer(BatchedEvaluator(spec), CMAESConfig(population=4, repeats=1, seed=0))


@pytest.mark.parametrize("target", ["trainer.json", "solutions", "cma_state"])
def test_cmaes_restore_refuses_a_bomb_and_deep_json(tmp_path: Path, target: str) -> None:
    trainer = cmaes()
    trainer.step()
    trainer.save(tmp_path)
    if target == "trainer.json":
        (tmp_path / target).write_text(DEEP)
    elif target == "solutions":
        bomb(next(tmp_path.glob("solutions*.pt")))
    else:
        _npz_bomb(next(tmp_path.glob("cma_state*.npz")))
    with pytest.raises(StateFormatError, match=r"nested more than 100|zip bomb"):
        cmaes().restore(tmp_path)
