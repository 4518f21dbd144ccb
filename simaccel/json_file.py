"""A JSON file read, every way it can be unreadable said as one SimAccelError naming it.

Where it sits: in the core's tools layer, beside `simaccel.debug`. What simaccel reads back from
earlier runs and from users (a timeline trace for `simaccel trace`, bench reports for
`simaccel bench --compare`, conformance.json for `simaccel conformance --compare`, a bench
artifacts folder's manifest) comes through `read_json`; each caller says what the file should
hold and checks the document's contents itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import SimAccelError


def read_json(path, label: str, hint: str = ""):
    """The JSON document in `path`, or a SimAccelError "LABEL: no such file", "LABEL: cannot
    read it: ..." or "LABEL: not valid JSON (...)" (`hint` appended after a semicolon)."""
    suffix = f"; {hint}" if hint else ""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SimAccelError(f"{label}: no such file{suffix}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SimAccelError(f"{label}: cannot read it: {getattr(e, 'strerror', None) or e}{suffix}") from None
    except json.JSONDecodeError as e:
        raise SimAccelError(f"{label}: not valid JSON ({e}){suffix}") from None
