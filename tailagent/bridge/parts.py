"""The two kinds of A2A part the bridge writes itself: text for a person, JSON data for
a program.

A turn's events (turns/publish.py) and a conversation's operations
(conversations/operations.py) answer with both; kept here, below them, so a merge's
reply does not have to reach up into the turn's publishing for two constructors.
"""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import Part
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value


def data_part(data: dict[str, Any]) -> Part:
    return Part(data=ParseDict(data, Value()), media_type="application/json")


def text_part(text: str, media_type: str = "") -> Part:
    return Part(text=text, media_type=media_type)
