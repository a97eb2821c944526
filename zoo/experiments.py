"""The seed experiments E1-E8 as ``attn-zoo report`` tabulates them: data, no I/O.

Each experiment is an :class:`Experiment`: its committed run folders under ``results/``
grouped into :class:`Cell` rows (the seeds of one cell are its runs), the score a row
reports (test accuracy, success rate or mean test return, read from each run's
``eval.json``), the source's published figure beside it, and its documentation page.
:mod:`zoo.report` reads the runs and renders the table.

Example:
    >>> exp = find_experiment("e3")
    >>> exp.key, exp.name, exp.page
    ('E3', 'cartpole_pi', 'docs/experiments/e3_cartpole.md')
    >>> exp.cells[0].pattern, exp.cells[0].published
    ('cartpole_pi/recipe', '472 ± 426')
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.config_checks import ConfigError

__all__ = ["EXPERIMENTS", "Cell", "Experiment", "find_experiment"]


@dataclass(frozen=True)
class Cell:
    """One row of an experiment's table.

    Attributes:
        label: the row's name.
        pattern: glob, relative to the results folder, of the row's run folders (or of
            folders holding them, one level down): the seeds of one cell.
        published: the source's figure for this row, as the source states it.
        policy: which ``eval.json`` policy to read (default: the first one).
        plot: draw its runs in the curves figure; off for a cell whose runs share a
            config name with another cell's (the figure groups runs by that name).
    """

    label: str
    pattern: str
    published: str = ""
    policy: str | None = None
    plot: bool = True


@dataclass(frozen=True)
class Experiment:
    """One seed experiment's report: where its runs are and what its table shows.

    Attributes:
        key: ``E1`` ... ``E8``.
        name: the name ``attn-zoo report`` takes (besides the key).
        folder: its folder under ``results/``: the default output of the report.
        score: the score's column title; ``test accuracy`` reads ``eval.json``'s
            ``test_accuracy``, a title with ``success`` the policy's ``success_rate``,
            anything else its ``mean_reward``.
        cells: the rows.
        page: its documentation page, relative to the repository root.
        final: the training episodes the "training return" column averages: a fraction of
            the steps (below 1) or a number of final env steps (1 or more).
        final_from_eval: read that column from ``eval.json``'s ``training_return`` (the
            trainer's own final window, e.g. seed 003's last 10,000 frames) instead.
        chain: glob, relative to the results folder, of multi-stage recipe run folders
            (``algo: recipe``): each seed's stages are drawn end to end against wall time
            (:func:`zoo.report_chains.plot_chain`).
        goal: a return line drawn on the chain's figure.
        x: the curves' x axis: ``"steps"`` (env steps) or ``"time"`` (wall time), for runs
            whose steps stop while they train (behaviour cloning on collected data).
        probes: labelled run folders (``(label, path under the results folder)``) of PPO
            probes, tabulated by their early policy steps (:func:`zoo.dynamics.dynamics_table`)
            into ``probes.md`` and the page's ``<!-- probes: ... -->`` block.
    """

    key: str
    name: str
    folder: str
    score: str
    cells: tuple[Cell, ...]
    page: str = ""
    final: float = 0.1
    final_from_eval: bool = False
    chain: str = ""
    goal: float | None = None
    x: str = "steps"
    probes: tuple[tuple[str, str], ...] = ()

    @property
    def percent(self) -> bool:
        return "accuracy" in self.score or "success" in self.score


def _c(
    label: str, pattern: str, published: str = "", policy: str | None = None, plot: bool = True
) -> Cell:
    return Cell(label, pattern, published, policy, plot)


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "E1",
        "mnist",
        "mnist",
        "test accuracy",
        (
            _c("relational, cpu budget (300 iterations)", "mnist/digits/relational/*", "94.6%"),
            _c("CNN, cpu budget (300 iterations)", "mnist/digits/cnn/*", "87.8%"),
            _c("relational, full budget (1,000)", "mnist/digits_full/relational/*", "94.6%"),
            _c("CNN, full budget (1,000)", "mnist/digits_full/cnn/*", "87.8%"),
        ),
        "docs/experiments/e1_mnist.md",
    ),
    Experiment(
        "E2",
        "doorkey",
        "doorkey",
        "test success rate",
        (
            _c("ε = 0.05", "doorkey", "≥ 94%", "eps0.05"),
            _c("greedy", "doorkey", "≥ 94%", "greedy"),
            _c("ε = 0.5 (the book's acting policy)", "doorkey", "≥ 94%", "eps0.5"),
            # The recipe: `attn-zoo train doorkey --budget cpu --seed S`, S = 0, 1, 2. Not
            # drawn: its runs share the config name `doorkey` with the run above.
            _c("ε = 0.05, recipe (seeds 0, 1, 2)", "doorkey/recipe", "≥ 94%", "eps0.05", False),
            # `attn-zoo train doorkey_fast --seed S`: gamma 0.9, 30,000 steps (issue 49)
            _c("ε = 0.05, γ = 0.9 recipe (seeds 0, 1, 2)", "doorkey/fast", "≥ 94%", "eps0.05"),
            _c("greedy, γ = 0.9 recipe", "doorkey/fast", "≥ 94%", "greedy", False),
            # the same with two torch threads and 10 reward copies: within 600 s (issue 49);
            # not drawn: its runs share the config name `doorkey_fast` with the row above
            _c(
                "ε = 0.05, γ = 0.9, 2 threads, 10 copies (seeds 0, 1, 2)",
                "doorkey/ten_minutes",
                "≥ 94%",
                "eps0.05",
                False,
            ),
        ),
        "docs/experiments/e2_doorkey.md",
    ),
    Experiment(
        "E3",
        "cartpole_pi",
        "cartpole_pi",
        "test return",
        (
            # The recipe: `attn-zoo train cartpole_pi --budget cpu --seed S`, tested on 1,000
            # episodes seeded 3,000,000 on. Not drawn among the curves: its stages are (chain).
            _c("PI, recipe `cartpole_pi`", "cartpole_pi/recipe", "472 ± 426", plot=False),
            _c("PI, CMA-ES from x0 = 0 (`pi_x0`)", "cartpole_pi/pi_x0", "472 ± 426"),
            _c("FNN", "cartpole_pi/fnn", "593 ± 433"),
            _c("PI, the authors' checkpoint", "pretrained/cartpole_pi", "516.6 ± 420.4 (log)"),
        ),
        "docs/experiments/e3_cartpole.md",
        chain="cartpole_pi/recipe/*",
        goal=450.0,
    ),
    Experiment(
        "E4",
        "ant_bc",
        "ant_bc",
        "test return",
        (
            _c("PI (BC), cpu budget, 20 epochs", "ant_bc/ant_pi_bc", "2034 ± 948"),
            _c("larger PI (BC), cpu budget, 20 epochs", "ant_bc/ant_pi_bc_large", "2579 ± 457"),
            # The ablation (issue 48): `attn-zoo train ant_pi_bc_ablation --budget cpu --set
            # teacher=ANT_MLP factor=F`, one factor of ant_pi_bc's cpu budget changed per cell.
            _c("ablation: base (ant_pi_bc's cpu budget)", "ant_bc/ablation/base", "2034 ± 948"),
            _c("ablation: half the teacher data (500 rollouts)", "ant_bc/ablation/data_half"),
            _c("ablation: BPTT through the whole 500 steps", "ant_bc/ablation/window_500"),
            _c("ablation: no previous-action noise", "ant_bc/ablation/no_prev_action_noise"),
            _c("ablation: 60 epochs", "ant_bc/ablation/epochs_60"),
            _c("ablation: large student (M = 128, two FC 128)", "ant_bc/ablation/large"),
            _c("ablation: noise 0.1 on the teacher's actions", "ant_bc/ablation/teacher_act*"),
            _c("ablation: DAgger instead of cloning", "ant_bc/ablation/dagger"),
            _c("ablation: the authors' released script's settings", "ant_bc/ablation/script"),
            # The contrast: `attn-zoo train ant_fnn_bc --budget cpu --set teacher=ANT_MLP`.
            _c("contrast: the teacher's FNN cloned the same way", "ant_bc/ant_fnn_bc"),
        ),
        "docs/experiments/e4_ant.md",
        x="time",
    ),
    Experiment(
        "E5",
        "puzzle_pong",
        "puzzle_pong",
        "test return",
        (
            # The recipe: `attn-zoo train puzzle_pong_bc --budget cpu --seed S --set
            # occlusion=0.0 teacher=results/puzzle_pong/teacher_phases/0`; its best epoch is
            # kept on checks with sticky actions, never on the test's games (test a here).
            _c("KL student, the recipe (test a)", "puzzle_pong/recipe", "21 ± 0"),
            _c(
                "KL student of the every-phase teacher, epoch picked on the test's games",
                "puzzle_pong/phases/kl",
                "21 ± 0",
            ),
            _c(
                "cross-entropy student of it, the same",
                "puzzle_pong/phases/ce",
                "21 ± 0",
                plot=False,
            ),
            _c("the every-phase RAM teacher", "puzzle_pong/teacher_phases/0"),
            _c("KL student, occlusion 0.3 in training", "puzzle_pong/phases/kl_0.3", "21"),
            _c("KL student, occlusion 0.5 in training", "puzzle_pong/phases/kl_0.5", "21"),
            _c("KL student of the first teacher", "puzzle_pong/exact/kl", "21 ± 0", plot=False),
        ),
        "docs/experiments/e5_puzzle_pong.md",
    ),
    Experiment(
        "E6",
        "car_racing",
        "pretrained",
        "test return",
        (
            _c(
                "AttentionNeuron (`carracing_pi`), classic screen", "pretrained/carracing_pi", "801"
            ),
            _c(
                "the same, Gymnasium's screen",
                "pretrained/carracing_pi_gymnasium_screen",
                "801",
            ),
        ),
        "docs/experiments/e6_car_racing.md",
    ),
    Experiment(
        "E7",
        "atariari",
        "atariari",
        "test return",
        tuple(
            _c(f"Pong {cond}, {label}", f"atariari/Pong-{cond}-{model}/*", claim)
            for cond, model, label, claim in (
                ("L", "g_awrl", "g-AWRL", "learns Pong"),
                ("L", "fc", "FC", ""),
                ("4L", "g_awrl", "g-AWRL", "learns; ahead of a-CNN"),
                ("4L", "d_awrl", "d-AWRL", "learns Pong"),
                ("4L", "content", "g-AWRL content-only", "fast but unstable"),
                ("4L", "address", "g-AWRL address-only", "stable but low"),
                ("4L", "fc", "FC", ""),
                ("4L", "acnn", "a-CNN", "behind g-AWRL"),
            )
        ),
        "docs/experiments/e7_atariari.md",
        probes=(
            ("FC baseline, 1M steps", "atariari/probes/fc_1M"),
            (
                "g-AWRL as configured (table 7.2 heads on 8 x 128 tokens, ReLU), 1M steps",
                "atariari/probes/g_awrl_1M",
            ),
            (
                "g-AWRL, batch-norm with batch statistics when acting too",
                "atariari/probes/g_awrl_batch_stats",
            ),
            (
                "g-AWRL, no activation after the batch-norms (the text names none)",
                "atariari/probes/g_awrl_identity",
            ),
            (
                "g-AWRL, a final FC of 32 units before the heads (the text's final FC)",
                "atariari/probes/g_awrl_fc32",
            ),
            (
                "g-AWRL, PyTorch's default init instead of SB3's orthogonal one",
                "atariari/probes/g_awrl_no_ortho",
            ),
            (
                "g-AWRL, learning rate 2.5e-5 (a tenth of the thesis's), 2M steps",
                "atariari/probes/g_awrl_lr2.5e-5",
            ),
        ),
    ),
    Experiment(
        "E8",
        "atari_nonlocal",
        "atari_nonlocal",
        "test return",
        (
            _c("Pong, Nature CNN", "atari_nonlocal/Pong-cnn/*", "18.1 (10M steps)"),
            _c("Pong, non-local before FC", "atari_nonlocal/Pong-fc/*", "19.5 (10M steps)"),
            _c(
                "Pong, Nature CNN, 10M steps (full budget)", "atari_nonlocal/10M/Pong-cnn/*", "18.1"
            ),
            _c(
                "Pong, non-local before FC, 10M steps (full budget)",
                "atari_nonlocal/10M/Pong-fc/*",
                "19.5",
            ),
        ),
        "docs/experiments/e8_atari_nonlocal.md",
        final=10_000,
        final_from_eval=True,
    ),
)


def find_experiment(name: str) -> Experiment:
    """The experiment called ``name`` (``E3``, ``e3`` or ``cartpole_pi``).

    Raises:
        ConfigError: no such experiment (the message lists them).
    """
    for exp in EXPERIMENTS:
        if name.lower() in (exp.key.lower(), exp.name):
            return exp
    names = ", ".join(f"{e.key} ({e.name})" for e in EXPERIMENTS)
    raise ConfigError(f"unknown experiment {name!r} for report; choose one of {names}")
