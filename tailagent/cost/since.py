"""How the command line reads `--since WHEN`: an age back from now (`30m`, `12h`, `7d`)
or an ISO time, the same for `tailagent audit` and `tailagent usage`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_AGE = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(text: str) -> datetime:
    """The moment `text` names, in UTC when it names no zone; ValueError when it is
    neither an age nor an ISO time."""
    age = _AGE.fullmatch(text.strip())
    if age:
        amount, unit = int(age.group(1)), _UNITS[age.group(2)]
        return datetime.now(UTC) - timedelta(**{unit: amount})
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
