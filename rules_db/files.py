"""Reading and writing rule sets: taso's JSON, and TASO's `graph_subst.pb`.

Every rule read is checked (`pattern.checked`): a malformed one is refused
with one line naming the file, the rule and the problem.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from .parse import checked_set, parse_ruleset
from .pattern import RuleError
from .rule import RuleSet
from .taso_pb import read_taso_pb


def load(path: str | Path) -> RuleSet:
    """Load a rule set: taso JSON (gzip-compressed or not), or TASO's protobuf
    `.pb` file."""
    path = Path(path)
    try:
        if path.suffix == ".pb":
            return checked_set(read_taso_pb(path))
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":  # gzip's magic number
            data = gzip.decompress(data)
        return parse_ruleset(json.loads(data))
    except gzip.BadGzipFile as e:  # (an OSError)
        raise ValueError(f"{path} is not a taso rule set: {e}") from None
    except OSError as e:
        raise ValueError(f"cannot read rule set {path}: {e.strerror or e}") from None
    except RuleError as e:
        raise ValueError(f"{path}: {e}") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, EOFError,
            zlib.error) as e:  # (a truncated or corrupt gzip file too)
        # Bad JSON, a binary file, a JSON file of something else: name the file.
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
        raise ValueError(f"{path} is not a taso rule set: {what}") from None


def save(rules: RuleSet, path: str | Path) -> None:
    rules.save(path)
