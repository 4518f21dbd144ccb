"""Arrays in .npz files (a model's arguments, its outputs) and the checks on a path a user gives.

Where it sits: `simaccel run` reads --inputs and --expect and writes --save, `simaccel build`
writes a library's inputs and TVM alone's outputs, `simaccel bisect` and the fuzzer's
reproductions read and write theirs, all through `read_arrays` and `write_arrays`: arrays
named arg0, arg1, ... (numpy's arr_0, ... accepted), every problem a SimAccelError naming the
file and what is wrong with it. A bfloat16 array is written as numpy writes ml_dtypes' types,
raw 2-byte elements (dtype V2), and read back as bfloat16 (`npz_array`).
"""

from __future__ import annotations

import os
import re
import zipfile
import zlib

import ml_dtypes
import numpy as np

from ....errors import SimAccelError
from .error_line import error_line

NPZ_KEY = re.compile(r"(arg|arr_)(0|[1-9][0-9]*)")
NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)  # what numpy raises on bad files


def npz_array(array: np.ndarray) -> np.ndarray:
    """An array as read from an .npz, with its dtype back: numpy stores ml_dtypes' bfloat16 as
    2-byte raw elements (V2), the only such dtype the ISA's arrays have."""
    return array.view(ml_dtypes.bfloat16) if isinstance(array, np.ndarray) and array.dtype == np.dtype("V2") else array


def check_readable(path, label: str = "file") -> None:
    """Refuse a path that is missing, a folder, or unreadable, naming it as `label`."""
    if not os.path.exists(path):
        raise SimAccelError(f"{label} {path}: no such file")
    if not os.path.isfile(path):
        raise SimAccelError(f"{label} {path}: not a file (a folder?)")
    if not os.access(path, os.R_OK):
        raise SimAccelError(f"{label} {path}: not readable (permission denied)")


def check_writable(path, label: str = "file") -> None:
    """Refuse, before any work is done, a path that cannot be written (probes it: open for append)."""
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
        if not existed:
            os.remove(path)
    except OSError as e:
        raise SimAccelError(f"{label} {path}: cannot write there: {e.strerror or e}") from e


def read_arrays(path: str | os.PathLike, label: str = "file") -> list[np.ndarray]:
    """Arrays of an .npz in argument order: keys arg0, arg1, ... or numpy's arr_0, arr_1, ...

    Refuses files that are not .npz archives, non-numeric arrays, and keys that do not name
    each position 0..n-1 exactly once in one style (gaps, duplicates, mixed or unknown names).
    """
    where = f"{label} {path}"
    check_readable(path, label)
    _check_zip(where, path)
    try:
        data = np.load(path, allow_pickle=False)
    except NPZ_ERRORS as e:
        raise SimAccelError(f"{where}: a damaged .npz (zip) archive ({error_line(e)})") from e
    with data:
        return [_read_array(where, data, key) for key in _argument_order(where, data.files)]


def _check_zip(where: str, path) -> None:
    """Refuse, by its first bytes, a file that is not a zip archive (as every .npz is)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        raise SimAccelError(f"{where}: cannot read it: {e.strerror or e}") from e
    if magic.startswith(b"\x93NUMPY"):
        raise SimAccelError(f"{where}: a single .npy array, not an .npz archive; write one with np.savez(path, arg0=...)")
    if not magic.startswith(b"PK"):
        what = "an empty file" if not magic else "not a zip file"
        raise SimAccelError(f"{where}: not an .npz archive ({what}); write one with np.savez(path, arg0=...)")


def _argument_order(where: str, keys: list[str]) -> list[str]:
    matches = {key: NPZ_KEY.fullmatch(key) for key in keys}
    unknown = [key for key, m in matches.items() if m is None]
    if unknown:
        raise SimAccelError(f"{where}: array names {', '.join(unknown)} are not argN or arr_N; name them arg0, arg1, ...")
    if len({m[1] for m in matches.values()}) > 1:
        raise SimAccelError(f"{where}: keys {', '.join(sorted(keys))} mix argN and arr_N names; use one style, arg0, arg1, ...")
    ordered = sorted(keys, key=lambda key: int(matches[key][2]))
    positions = [int(matches[key][2]) for key in ordered]
    if len(keys) != len(set(keys)):
        raise SimAccelError(f"{where}: keys {', '.join(ordered)} name a position twice")
    if positions != list(range(len(keys))):
        gaps = sorted(set(range(positions[-1])) - set(positions))
        raise SimAccelError(
            f"{where}: keys {', '.join(ordered)} leave out position(s) {', '.join(map(str, gaps))}; "
            "arguments are numbered from 0 with no gaps"
        )
    return ordered


def _read_array(where: str, data, key: str) -> np.ndarray:
    try:
        array = npz_array(data[key])
    except NPZ_ERRORS as e:
        raise SimAccelError(f"{where}: cannot read array {key!r} ({error_line(e)})") from e
    if not isinstance(array, np.ndarray) or (array.dtype.kind not in "biufc" and array.dtype != ml_dtypes.bfloat16):
        kind = array.dtype if isinstance(array, np.ndarray) else "raw bytes"
        raise SimAccelError(f"{where}: {key!r} is not a numeric array ({kind})")
    return array


def write_arrays(path, arrays, label: str = "file") -> None:
    """Write `arrays` as arg0, arg1, ... to an .npz at exactly `path` (no suffix added)."""
    try:
        with open(path, "wb") as f:
            np.savez(f, **{f"arg{i}": a for i, a in enumerate(arrays)})
    except OSError as e:
        raise SimAccelError(f"{label} {path}: cannot write there: {e.strerror or e}") from e
