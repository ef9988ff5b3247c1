"""Atomic files (a temporary file in the same folder, then :func:`os.replace`) and strict JSON for run
records and benchmark results: numpy/jax values become Python numbers and lists, non-finite floats the strings
``"nan"``, ``"inf"``, ``"-inf"``."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = [
    "atomic_savez",
    "atomic_write",
    "atomic_write_json",
    "atomic_write_text",
    "decode_nonfinite",
    "dumps",
    "to_builtin",
]

PathLike = str | os.PathLike
NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@functools.cache
def _file_mode() -> int:
    """Permission bits for new files under the current umask (temp files are created 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], object], *, suffix: str = ".tmp") -> None:
    """Call ``write(binary_file)`` on a temporary file next to ``path``, then move it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data))


def _float(x: float):
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def to_builtin(obj: Any) -> Any:
    """Convert ``obj`` to plain JSON types (see the module docstring); TypeError if impossible."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return _float(float(obj))
    if isinstance(obj, complex):
        return {"real": _float(obj.real), "imag": _float(obj.imag)}
    if isinstance(obj, Mapping):
        return {str(k): to_builtin(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_builtin(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        items = [to_builtin(v) for v in obj]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, np.generic):
        return to_builtin(obj.item())
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError("cannot convert an object array to JSON")
        return to_builtin(obj.tolist())
    if hasattr(obj, "__array__") and hasattr(obj, "dtype"):  # jax.Array and friends
        return to_builtin(np.asarray(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_builtin(dataclasses.asdict(obj))
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def dumps(obj: Any) -> str:
    return json.dumps(to_builtin(obj), indent=2, sort_keys=True, allow_nan=False, default=to_builtin) + "\n"


def atomic_write_json(path: PathLike, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted, strict JSON to ``path`` atomically.

    numpy/jax scalars and arrays are converted; NaN and infinities become the strings
    ``"nan"``, ``"inf"``, ``"-inf"``.  Raises TypeError for objects that cannot be converted.
    """
    text = dumps(obj)  # convert before touching the file system
    atomic_write_text(path, text)


def atomic_savez(path: PathLike, **arrays: Any) -> None:
    """``np.savez_compressed(path, **arrays)`` into a temporary file, then move it into place."""
    converted: dict[str, Any] = {}  # Any: numpy's stub types savez's **kwds like its flag
    for key, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype == object:
            raise ValueError(f"arrays[{key!r}] has dtype object, which cannot be saved")
        converted[key] = arr
    atomic_write(path, lambda f: np.savez_compressed(f, **converted))


def decode_nonfinite(obj: Any) -> Any:
    """The strings ``"nan"``, ``"inf"``, ``"-inf"`` (anywhere in nested dicts and lists) back to floats."""
    if isinstance(obj, str):
        return NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: decode_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_nonfinite(v) for v in obj]
    return obj
