"""Logging for a person at a terminal, for journald, or as JSON lines.

Under journald (JOURNAL_STREAM is set) lines carry no timestamp: the journal
stamps every line itself.

A record's text holds what requests carried (a path, a JSON-RPC method, an id), so
every line is made safe here, for every logger alike: a record is one line with its
control characters escaped, and a traceback's lines are each indented under it, so
nothing a request sends can start a line of its own (a forged record) or reach an
operator's `tail -f` as an escape sequence.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime

from tailagent.output.visible import json_line, visible

CONTINUED = "  | "  # begins each line under a record (a traceback): no record does


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json_line(entry)


class LineFormatter(logging.Formatter):
    """One record, one line: the message's newlines and controls escaped; a traceback
    or stack kept readable on the lines under it, each marked as continuing."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return visible(super().formatMessage(record), one_line=True)

    def format(self, record: logging.LogRecord) -> str:
        # Past the first line is only a traceback or a stack (the message is one line
        # now), whoever formatted it first: record.exc_text is kept on the record.
        line, _, rest = super().format(record).partition("\n")
        if not rest:
            return line
        return line + "".join(f"\n{CONTINUED}{visible(part)}" for part in rest.split("\n"))


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    elif os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(LineFormatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(LineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at info: each LocalAPI lookup and each push delivery
    # would take a line. Our own lines say what matters; debug brings httpx's back.
    if level != "debug":
        logging.getLogger("httpx").setLevel(logging.WARNING)
