"""MkDocs hooks: the evidence under ``results/`` joins the site where the runs wrote it.

- Each PNG under ``results/`` and ``benchmarks/results/`` is added to the build at its
  repository path, so a page links it as ``../results/<experiment>/curves.png`` (from
  ``docs/experiments/``) and a missing figure fails ``mkdocs build --strict``.
- A page line ``--8<-- "results/.../table.md"`` is replaced by that file (the tables
  ``attn-zoo robustness`` wrote), with a blank line put before a list that follows a
  paragraph line, as Markdown needs; a missing file stops the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
FIGURE_DIRS = ("results", "benchmarks/results")
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)


def include(markdown: str) -> str:
    """``markdown`` with its ``--8<-- "PATH"`` lines replaced by the files (PATH relative
    to the repository root).

    Raises:
        FileNotFoundError: an included file is missing.
    """
    return INCLUDE.sub(lambda m: _as_block((ROOT / m.group(1)).read_text()), markdown)


def _as_block(text: str) -> str:
    lines = text.rstrip("\n").splitlines()
    out: list[str] = []
    for line in lines:
        starts_list = line.startswith("- ")
        if starts_list and out and out[-1] and not out[-1].startswith(("- ", "  ")):
            out.append("")
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return include(markdown)


def on_files(files: Files, config: Any) -> Files:
    for folder in FIGURE_DIRS:
        for png in sorted((ROOT / folder).rglob("*.png")):
            uri = png.relative_to(ROOT).as_posix()
            files.append(File(uri, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


class DocstringMarkup(griffe.Extension):
    """Griffe extension for the project's docstrings: Google-style ``Example:`` sections
    (singular) parse as Examples, so their doctests render as code, and Sphinx roles
    (``:func:`name```, ``:class:`~pkg.Name```) render as the code span of the name."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = re.sub(r"^(\s*)Example:$", r"\1Examples:", obj.docstring.value, flags=re.M)
            obj.docstring.value = ROLE.sub(_role_name, text)


ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")


def _role_name(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"
