"""Tests for attn_envs.ram_annotations: the AtariARI RAM table and game names (E7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs.ram_annotations import RAM_ANNOTATIONS, game_from_env_id, resolve_game

E7_COUNTS = {"Pong": 8, "DemonAttack": 10, "Asteroids": 41}


def test_e7_tables_exact() -> None:
    assert RAM_ANNOTATIONS["Pong"] == {
        "player_y": 51, "player_x": 46, "enemy_y": 50, "enemy_x": 45,
        "ball_x": 49, "ball_y": 54, "enemy_score": 13, "player_score": 14,
    }  # fmt: skip
    assert list(RAM_ANNOTATIONS["DemonAttack"].items()) == [
        ("player_x", 22), ("enemy_x1", 17), ("enemy_x2", 18), ("enemy_x3", 19),
        ("missile_y", 21), ("enemy_y1", 69), ("enemy_y2", 70), ("enemy_y3", 71),
        ("num_lives", 114), ("level", 62),
    ]  # fmt: skip
    ast = RAM_ANNOTATIONS["Asteroids"]
    assert list(ast.values())[:11] == [73, 74, 60, 61, 62, 83, 84, 86, 87, 89, 90]
    ys = [v for k, v in ast.items() if k.startswith("enemy_asteroids_y_")]
    xs = [v for k, v in ast.items() if k.startswith("enemy_asteroids_x_")]
    assert ys == [*range(3, 10), *range(12, 20)]
    assert xs == [*range(21, 28), *range(30, 38)]
    assert "enemy_asteroids_y_0" in ast and "enemy_asteroids_x_14" in ast
    assert {g: len(RAM_ANNOTATIONS[g]) for g in E7_COUNTS} == E7_COUNTS


@pytest.mark.parametrize(
    ("env_id", "game"),
    [
        ("ALE/Pong-v5", "Pong"),
        ("PongNoFrameskip-v4", "Pong"),
        ("Pong-v0", "Pong"),
        ("PongDeterministic-v4", "Pong"),
        ("Pong-ramNoFrameskip-v4", "Pong"),
        ("Pong-ram-v0", "Pong"),
        ("ALE/DemonAttack-v5", "DemonAttack"),
        ("MontezumaRevengeNoFrameskip-v4", "MontezumaRevenge"),
    ],
)
def test_game_from_env_id(env_id: str, game: str) -> None:
    assert game_from_env_id(env_id) == game


@settings(max_examples=60, deadline=None)
@given(
    game=st.sampled_from(sorted(RAM_ANNOTATIONS)),
    template=st.sampled_from(
        ["ALE/{}-v5", "{}-v0", "{}-v4", "{}NoFrameskip-v4", "{}Deterministic-v4", "{}-ram-v0"]
    ),
)
def test_game_from_env_id_round_trips(game: str, template: str) -> None:
    assert resolve_game(game_from_env_id(template.format(game))) == game


def test_resolve_game() -> None:
    assert resolve_game("demon_attack") == resolve_game("DEMONATTACK") == "DemonAttack"
    with pytest.raises(ValueError, match=r"no RAM annotation for game 'Alien'.*Pong"):
        resolve_game("Alien")
    with pytest.raises(ValueError, match="cannot read a game name"):
        game_from_env_id("ALE/")
