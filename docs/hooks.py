"""MkDocs hook: the figures under ``results/`` and ``benchmarks/results/`` join the site.

The evidence stays where the runs wrote it (outside ``docs/``); each PNG is added to the
build at its repository path, so a page links it as ``../results/<experiment>/curves.png``
(from ``docs/experiments/``) and a missing figure fails ``mkdocs build --strict``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
FIGURE_DIRS = ("results", "benchmarks/results")


def on_files(files: Files, config: Any) -> Files:
    for folder in FIGURE_DIRS:
        for png in sorted((ROOT / folder).rglob("*.png")):
            uri = png.relative_to(ROOT).as_posix()
            files.append(File(uri, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


class ExampleSections(griffe.Extension):
    """Griffe extension: the project's Google-style ``Example:`` sections (singular) parse as
    Examples, so their doctests render as code instead of quoted prose."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = re.sub(
                r"^(\s*)Example:$", r"\1Examples:", obj.docstring.value, flags=re.M
            )
