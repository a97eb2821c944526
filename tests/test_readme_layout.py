"""The README's "Layout" module map names every module of the three packages, and only those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("attn_envs", "attn_policies", "zoo")


def _layout_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1]
    return section.split("```", 2)[1]


def _mapped_modules() -> set[str]:
    found: set[str] = set()
    package = ""
    for line in _layout_block().splitlines():
        if re.match(r"^\S+/\s", line + " "):
            package = line.split("/", 1)[0]
            continue
        names = line.strip().split("  ", 1)[0]
        for name in names.split(", "):
            if package in PACKAGES and name.endswith(".py"):
                found.add(f"{package}/{name}")
    return found


def test_layout_names_every_module_and_no_missing_one() -> None:
    modules = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py"
    }
    mapped = {m for m in _mapped_modules() if not m.endswith("/__init__.py")}
    assert not modules - mapped, f"modules missing from the README layout: {modules - mapped}"
    assert not mapped - modules, f"README layout names missing modules: {mapped - modules}"
