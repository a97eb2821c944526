"""The module map of the docs' "Code layout" page (``docs/layout.md``, moved there from the
README) names every module of the three packages, and only those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("attn_envs", "attn_policies", "zoo")


def _layout_block() -> str:
    return (ROOT / "docs" / "layout.md").read_text().split("```", 2)[1]


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
    assert not modules - mapped, f"modules missing from docs/layout.md: {modules - mapped}"
    assert not mapped - modules, f"docs/layout.md names missing modules: {mapped - modules}"


SETUP = 'pip install torch==2.13.0 && pip install -e ".[dev]"'
COMMANDS = (
    f"{SETUP} && attn-zoo train doorkey --budget cpu --report",
    f"{SETUP} && python -m pytest -n 2",
)


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    """A newcomer's README: at most 250 lines, with the main job and the test suite as the
    two set-up-and-go commands (``.ci/run`` runs the second verbatim)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    for command in COMMANDS:
        assert command in blocks, f"README lacks the command block {command!r}"
    assert COMMANDS[1] in (ROOT / ".ci" / "run").read_text()


def test_readme_links_point_at_files() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert links, "the README links into docs/"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
