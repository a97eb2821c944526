"""Bounded reads of files that may come from strangers (run folders, checkpoints): JSON,
zips (an SB3 ``.zip``, a torch ``.pt``) and tensor files, each checked before it is parsed
or inflated, so a small file cannot exhaust memory or the interpreter's stack.

The checks live here, below the zoo, so that the algorithms' own ``restore`` functions
(CMA-ES, PGPE, DAgger, APG, BC) and the zoo's readers (:func:`zoo.config_checks.read_json`,
:func:`zoo.trainers.sb3_state.check_archive`) go through the same code. Each function
raises ``error`` (default :class:`UnsafeFileError`, a ``ValueError``) with one line naming
the file and the problem; the zoo passes its ``ConfigError`` so its messages and exit
status stay those of a bad config.

Example:
    >>> parse_json("[" * 100_000 + "]" * 100_000, "status.json")
    Traceback (most recent call last):
    ...
    attn_policies.safe_reads.UnsafeFileError: status.json: the JSON is nested more than 100 ...
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "MAX_RATIO",
    "MAX_TEXT_BYTES",
    "MEMORY_SHARE",
    "RATIO_FLOOR",
    "UnsafeFileError",
    "available_memory",
    "check_archive",
    "check_memory",
    "load_tensors",
    "parse_json",
    "read_json",
    "read_lines",
]

ErrorType = type[Exception]


class UnsafeFileError(ValueError):
    """A file that cannot be read safely (too large, too deep, a zip bomb): one line."""


MEMORY_SHARE = 0.5
"""The share of the available memory one run may plan for."""


def available_memory() -> int:
    """Bytes of memory available to a new allocation (``MemAvailable``), or a large number
    where the platform does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 2**62


def check_memory(
    where: str, need: float, what: str, fix: str, error: ErrorType = UnsafeFileError
) -> None:
    """The one memory bound: ``need`` bytes, estimated from a config or a file's headers
    before anything is allocated or written, must fit in :data:`MEMORY_SHARE` of
    :func:`available_memory`."""
    have = MEMORY_SHARE * available_memory()
    if need > have:
        raise error(
            f"{where}: {what} needs about {need / 2**30:,.1f} GiB, more than the "
            f"{have / 2**30:,.1f} GiB a run may plan for (half the memory available); {fix}"
        )


MAX_JSON_DEPTH = 100
"""Nesting a run folder's JSON may have: ours is a few levels deep; 100,000 nested ``[``
would end json's parser (or the code reading it) in a ``RecursionError``."""
MAX_JSON_BYTES = 256 * 2**20
"""The largest JSON file a run folder may hold (the longest committed is a few MB)."""

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def parse_json(text: str | bytes, where: str, error: ErrorType = UnsafeFileError) -> Any:
    """A JSON document from a run folder (or a zip entry): nesting past
    :data:`MAX_JSON_DEPTH`, a syntax error or bytes that are not UTF-8 are one ``error``
    naming ``where``, before the parser recurses."""
    try:
        text = text.decode() if isinstance(text, bytes) else text
    except UnicodeDecodeError as err:
        raise error(f"{where}: not valid JSON (not UTF-8 text: {err})") from None
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise error(f"{where}: the JSON is nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise error(f"{where}: not valid JSON ({' '.join(str(err).split())[:200]})") from None


def _size(path: Path, limit: int, what: str, error: ErrorType) -> int:
    size = path.stat().st_size
    if size > limit:
        raise error(f"{path}: {size:,} bytes, more than the {limit:,} {what} may have")
    return size


def read_json(path: str | Path, error: ErrorType = UnsafeFileError) -> Any:
    """A run folder's JSON file through :func:`parse_json`, after its size
    (:data:`MAX_JSON_BYTES`); a missing file is ``FileNotFoundError``, another read error
    an ``error``."""
    path = Path(path)
    try:
        _size(path, MAX_JSON_BYTES, "a run's JSON", error)
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise error(f"{path}: not readable ({err})") from None
    return parse_json(data, str(path), error)


MAX_TEXT_BYTES = 2**30
"""The largest text table (``metrics.csv``, ``progress.csv``) a run folder may hold: a
long Atari run's is tens of MB."""
MAX_LINE_BYTES = 2**16
"""The longest line such a table may have: the zoo's rows are under 200 characters."""


def read_lines(path: str | Path, error: ErrorType = UnsafeFileError, skip: int = 0) -> list[str]:
    """The lines of a run folder's text table (ends kept), after ``skip`` lines: a file past
    :data:`MAX_TEXT_BYTES` or a line past :data:`MAX_LINE_BYTES` is one ``error`` naming the
    file and the line, read no further (a 1 GB line is never held in memory). A NUL byte
    is refused too (no text table has one). Feed the result to :func:`csv.reader`."""
    path = Path(path)
    lines: list[str] = []
    try:
        _size(path, MAX_TEXT_BYTES, "a run's table", error)
        with path.open(newline="") as fh:
            number = 0
            while True:
                line = fh.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return lines
                number += 1
                if len(line) > MAX_LINE_BYTES:
                    raise error(
                        f"{path}: line {number} is longer than {MAX_LINE_BYTES:,} characters"
                    )
                if "\0" in line:
                    raise error(f"{path}: line {number} holds a NUL byte: not a text table")
                if number > skip:
                    lines.append(line)
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text ({err})") from None
    except OSError as err:
        raise error(f"{path}: not readable ({err})") from None


MAX_RATIO = 100
"""The most an entry of a run's zip (an SB3 ``.zip``, a torch ``.pt``) may inflate over its
compressed size once it declares more than :data:`RATIO_FLOOR` bytes: weights deflate to
about their size (torch stores them uncompressed), zeros a thousand times smaller."""
RATIO_FLOOR = 2**20


def check_archive(
    file: str | Path,
    limit: float | None = None,
    what: str = "model",
    error: ErrorType = UnsafeFileError,
) -> None:
    """Refuse, before any entry is read, a zip whose entries inflate past what they could
    hold: an entry declaring more than :data:`MAX_RATIO` times its compressed size (a 1 MB
    file inflating to 1 GB), entries declaring more than ``limit`` bytes together (what the
    run's ``what``, built from its config, can hold) or more than the memory bound
    (:func:`check_memory`). A file that is not a zip (torch's legacy format) is left to its
    reader: it can hold no more than its own size."""
    file = Path(file)
    try:
        if not zipfile.is_zipfile(file):
            return
        with zipfile.ZipFile(file) as archive:
            infos = archive.infolist()
    except (OSError, zipfile.BadZipFile) as err:
        raise error(f"{file}: not a readable zip ({err})") from None
    total = 0
    for info in infos:
        size, packed = info.file_size, max(info.compress_size, 1)
        if size > RATIO_FLOOR and size > MAX_RATIO * packed:
            raise error(
                f"{file}: entry {info.filename!r} declares {size:,} bytes from {packed:,} "
                f"compressed (over {MAX_RATIO}x): refused as a zip bomb, before reading it"
            )
        total += size
    if limit is not None and total > limit:
        raise error(
            f"{file}: its entries declare {total:,} bytes, more than the run's {what} can hold "
            f"(about {int(limit):,})"
        )
    check_memory(str(file), total, "its entries once inflated", "it is not loaded", error)


def load_tensors(
    file: str | Path,
    limit: float | None = None,
    error: ErrorType = UnsafeFileError,
    map_location: Any = None,
) -> Any:
    """``torch.load(file, weights_only=True)`` after :func:`check_archive` (``limit``: the
    bytes the file may declare, ``what`` it holds: tensors). Errors of ``torch.load`` itself
    are left to the caller, which names what the file should have been."""
    import torch

    check_archive(file, limit, "tensors", error)
    data = Path(file).read_bytes()
    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
