"""The AtariARI RAM annotation table: which bytes of the 128-byte Atari RAM hold which state
variable (positions, scores, lives), per game, and game-name lookup.

Pure data and name handling (no emulator): :mod:`attn_envs.atari_ram` builds its wrappers on
it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

__all__ = [
    "RAM_ANNOTATIONS",
    "RAM_SIZE",
    "feature_indices",
    "game_from_env_id",
    "resolve_game",
]

RAM_SIZE = 128

# RAM indices from the AtariARI annotation table (Anand et al. 2019, "Unsupervised State
# Representation Learning in Atari"; atariari/benchmark/ram_annotations.py). A sequence value is
# flattened to name_0, name_1, ... and, as in AtariARI, placed after the scalar entries. Pong,
# DemonAttack and Asteroids follow experiment E7's order (DemonAttack's level moves last).
# fmt: off
_ANNOTATIONS_RAW: dict[str, dict[str, int | Sequence[int]]] = {
    "Pong": dict(
        player_y=51, player_x=46, enemy_y=50, enemy_x=45, ball_x=49, ball_y=54,
        enemy_score=13, player_score=14,
    ),
    "DemonAttack": dict(
        player_x=22, enemy_x1=17, enemy_x2=18, enemy_x3=19, missile_y=21,
        enemy_y1=69, enemy_y2=70, enemy_y3=71, num_lives=114, level=62,
    ),
    "Asteroids": dict(
        player_x=73, player_y=74, num_lives_direction=60, player_score_high=61,
        player_score_low=62, player_missile_x1=83, player_missile_x2=84, player_missile_y1=86,
        player_missile_y2=87, player_missile1_direction=89, player_missile2_direction=90,
        enemy_asteroids_y=[*range(3, 10), *range(12, 20)],
        enemy_asteroids_x=[*range(21, 28), *range(30, 38)],
    ),
    "BattleZone": dict(
        blue_tank_facing_direction=46, blue_tank_size_y=47, blue_tank_x=48,
        blue_tank2_facing_direction=52, blue_tank2_size_y=53, blue_tank2_x=54, num_lives=58,
        missile_y=105, compass_needles_angle=84, angle_of_tank=4, left_tread_position=59,
        right_tread_position=60, crosshairs_color=108, score=29,
    ),
    "Berzerk": dict(
        player_x=19, player_y=11, player_direction=14, player_missile_x=22,
        player_missile_y=23, player_missile_direction=21, robot_missile_direction=26,
        robot_missile_x=29, robot_missile_y=30, num_lives=90, robots_killed_count=91,
        game_level=92, enemy_evilOtto_x=46, enemy_evilOtto_y=89,
        enemy_robots_x=range(65, 73), enemy_robots_y=range(56, 65), player_score=range(93, 96),
    ),
    "Bowling": dict(
        ball_x=30, ball_y=41, player_x=29, player_y=40, frame_number_display=36,
        pin_existence=range(57, 67), score=33,
    ),
    "Boxing": dict(
        player_x=32, player_y=34, enemy_x=33, enemy_y=35, enemy_score=19, clock=17,
        player_score=18,
    ),
    "Breakout": dict(
        ball_x=99, ball_y=101, player_x=72, blocks_hit_count=77, block_bit_map=range(30),
        score=84,
    ),
    "Freeway": dict(player_y=14, score=103, enemy_car_x=range(108, 118)),
    "Frostbite": dict(
        top_row_iceflow_x=34, second_row_iceflow_x=33, third_row_iceflow_x=32,
        fourth_row_iceflow_x=31, enemy_bear_x=104, num_lives=76, igloo_blocks_count=77,
        enemy_x=range(84, 88), player_x=102, player_y=100, player_direction=4,
        score=[72, 73, 74],
    ),
    "Hero": dict(
        player_x=27, player_y=31, power_meter=43, room_number=28, level_number=117,
        dynamite_count=50, score=[56, 57],
    ),
    "MontezumaRevenge": dict(
        room_number=3, player_x=42, player_y=43, player_direction=52, enemy_skull_x=47,
        enemy_skull_y=46, key_monster_x=44, key_monster_y=45, level=57, num_lives=58,
        items_in_inventory_count=61, room_state=62, score_0=19, score_1=20, score_2=21,
    ),
    "MsPacman": dict(
        enemy_sue_x=6, enemy_inky_x=7, enemy_pinky_x=8, enemy_blinky_x=9, enemy_sue_y=12,
        enemy_inky_y=13, enemy_pinky_y=14, enemy_blinky_y=15, player_x=10, player_y=16,
        fruit_x=11, fruit_y=17, ghosts_count=19, player_direction=56, dots_eaten_count=119,
        player_score=120, num_lives=123,
    ),
    "Pitfall": dict(
        player_x=97, player_y=105, enemy_logs_x=98, enemy_scorpion_x=99, bottom_of_rope_y=18,
        clock_sec=89, clock_min=88,
    ),
    "PrivateEye": dict(
        player_x=63, player_y=86, room_number=92, clock=[67, 69], player_direction=58,
        score=[73, 74], dove_x=48, dove_y=39,
    ),
    "Qbert": dict(
        player_x=43, player_y=67, player_column=35, red_enemy_column=69, green_enemy_column=105,
    ),
    "Riverraid": dict(
        player_x=51, missile_x=117, missile_y=50, fuel_meter_high=55, fuel_meter_low=56,
    ),
    "Seaquest": dict(
        enemy_obstacle_x=range(30, 34), player_x=70, player_y=97,
        diver_or_enemy_missile_x=range(71, 75), player_direction=86,
        player_missile_direction=87, oxygen_meter_value=102, player_missile_x=103,
        score=[57, 58], num_lives=59, divers_collected_count=62,
    ),
    "Skiing": dict(
        player_x=25, clock_m=104, clock_s=105, clock_ms=106, score=107, object_y=range(87, 94),
    ),
    "SpaceInvaders": dict(
        invaders_left_count=17, player_score=104, num_lives=73, player_x=28, enemies_x=26,
        missiles_y=9, enemies_y=24,
    ),
    "Tennis": dict(
        enemy_x=27, enemy_y=25, enemy_score=70, ball_x=16, ball_y=17, player_x=26, player_y=24,
        player_score=69,
    ),
    "Venture": dict(
        sprite0_y=20, sprite1_y=21, sprite2_y=22, sprite3_y=23, sprite4_y=24, sprite5_y=25,
        sprite0_x=79, sprite1_x=80, sprite2_x=81, sprite3_x=82, sprite4_x=83, sprite5_x=84,
        player_x=85, player_y=26, current_room=90, num_lives=70, score_1_2=71, score_3_4=72,
    ),
    "VideoPinball": dict(
        ball_x=67, ball_y=68, player_left_paddle_y=98, player_right_paddle_y=102, score_1=48,
        score_2=50,
    ),
    "YarsRevenge": dict(
        player_yar_x=32, player_yar_y=31, yar_missile_x=38, yar_missile_y=37,
        enemy_qotile_x=43, enemy_qotile_y=42, qotile_missile_x=47, qotile_missile_y=46,
    ),
}
# fmt: on


def _flatten(table: dict[str, int | Sequence[int]]) -> dict[str, int]:
    scalars = {name: int(v) for name, v in table.items() if isinstance(v, int)}
    seqs = {
        f"{name}_{i}": int(vi)
        for name, v in table.items()
        if not isinstance(v, int)
        for i, vi in enumerate(v)
    }
    return {**scalars, **seqs}


#: Game name as in ALE ids ("Pong", "DemonAttack", ...) -> ordered {feature name: RAM index}.
RAM_ANNOTATIONS: dict[str, dict[str, int]] = {
    game: _flatten(table) for game, table in _ANNOTATIONS_RAW.items()
}

_GAME_KEYS = {game.lower(): game for game in RAM_ANNOTATIONS}
_ID_SUFFIXES = re.compile(r"(-ram)?(NoFrameskip|Deterministic)?(-ram)?(-v\d+)?$")


def game_from_env_id(env_id: str) -> str:
    """The game part of an ALE env id (namespace, version and frame-skip variants removed).

    Example:
        >>> game_from_env_id("ALE/Pong-v5"), game_from_env_id("PongNoFrameskip-v4")
        ('Pong', 'Pong')
        >>> game_from_env_id("Breakout-ramDeterministic-v4")
        'Breakout'
    """
    name = _ID_SUFFIXES.sub("", env_id.rsplit("/", 1)[-1])
    if not name.isalnum():
        raise ValueError(f"cannot read a game name from env id {env_id!r}")
    return name


def resolve_game(game: str) -> str:
    """Canonical ``RAM_ANNOTATIONS`` key for ``game`` ("pong", "demon_attack", "DemonAttack").

    Raises:
        ValueError: ``game`` has no RAM annotation; the message lists the games that have one.

    Example:
        >>> resolve_game("demon_attack"), resolve_game("pong")
        ('DemonAttack', 'Pong')
    """
    key = game.replace("_", "").replace("-", "").lower()
    if key not in _GAME_KEYS:
        raise ValueError(
            f"no RAM annotation for game {game!r}; known games: {', '.join(RAM_ANNOTATIONS)}"
        )
    return _GAME_KEYS[key]


def feature_indices(game: str) -> tuple[list[str], np.ndarray]:
    """Feature names and RAM indices (an ``intp`` array) of ``game``, in annotation order.

    Example:
        >>> names, idx = feature_indices("Pong")
        >>> names[:2], idx[:2].tolist(), len(names)
        (['player_y', 'player_x'], [51, 46], 8)
    """
    table = RAM_ANNOTATIONS[resolve_game(game)]
    return list(table), np.fromiter(table.values(), dtype=np.intp, count=len(table))
