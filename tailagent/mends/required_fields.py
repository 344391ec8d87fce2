"""a2a-sdk's check of REQUIRED fields, with each message type's fields read once.

a2a-sdk checks what a caller sends against the fields its proto marks REQUIRED
(`validate_proto_required_fields`: every SendMessage, and the SDK's handlers for the
other methods) and logs what it answers with that misses one
(`warn_on_missing_required_fields`). Its walk reads, at every field of every message
it visits, the field's options and the `field_behavior` extension in them, ~1.2 us a
field, and walks into every message field, a metadata Struct down to its last Value:
~50 us for a one-part SendMessage, ~3 % of a blocking send's server time
(docs/measured.md, issue 46). What a field is never changes, so here each message
type's fields are read once, into those that matter: the REQUIRED ones, and those
that hold messages in which a REQUIRED field can be (a Struct or a Timestamp holds
none, so none is walked). The walk is otherwise the SDK's: the same fields in the
same order, its own helpers for a violation and for naming a nested one, so the same
errors, word for word (tests/test_mends.py compares them on every A2A message type).

It takes the place of the private `_validate_proto_required_fields_internal` in
`a2a.utils.proto_utils`, which both public functions call; applied when this module
is imported (app.py imports it), on a2a-sdk 1.3.0 only, else the SDK's walk stays and
the start says so (mends/versions.py).
"""

from __future__ import annotations

import functools
from typing import Literal

from a2a.utils import proto_utils
from a2a.utils.proto_utils import ValidationDetail
from google.api.field_behavior_pb2 import FieldBehavior, field_behavior
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from tailagent.mends.versions import Mend, applies

REQUIRED_FIELDS_MEND = Mend(
    what="a2a-sdk's check of REQUIRED fields, each message type read once "
    "(mends/required_fields.py)",
    dist="a2a-sdk",
    written_for=("1.3.0",),
    without="every request's fields are read anew (~50 us a SendMessage)",
)
# How a field's value is walked into: not at all, one message, a map's values, a list.
Walk = Literal["", "one", "map", "each"]
# The SDK's own walk, as it was before this mend replaced it.
SDK_WALK = proto_utils._validate_proto_required_fields_internal


def _required(field: FieldDescriptor) -> bool:
    return FieldBehavior.REQUIRED in field.GetOptions().Extensions[field_behavior]  # type: ignore[index]


@functools.cache
def _holds_required(message_type: Descriptor) -> bool:
    """Whether a REQUIRED field can be anywhere in a message of this type, itself or
    in the messages it holds however deep (types may hold themselves: a Struct's
    Value holds a Struct)."""
    seen: set[Descriptor] = set()
    to_see = [message_type]
    while to_see:
        current = to_see.pop()
        if current in seen:
            continue
        seen.add(current)
        for field in current.fields:
            if _required(field):
                return True
            if field.message_type is not None:
                to_see.append(field.message_type)
    return False


@functools.cache
def _plan(message_type: Descriptor) -> tuple[tuple[FieldDescriptor, bool, Walk], ...]:
    """The fields the walk must look at, in the type's order: (field, REQUIRED, how its
    value is walked into)."""
    plan = []
    for field in message_type.fields:
        walk: Walk = ""
        if field.type == FieldDescriptor.TYPE_MESSAGE and _holds_required(field.message_type):
            if not proto_utils._field_is_repeated(field):
                walk = "one"
            elif field.message_type.GetOptions().map_entry:
                walk = "map"
            else:
                walk = "each"
        required = _required(field)
        if required or walk:
            plan.append((field, required, walk))
    return tuple(plan)


def missing_required(msg: Message) -> list[ValidationDetail]:
    """The REQUIRED fields missing in `msg` and in the messages it holds, as the
    SDK's walk finds them."""
    errors: list[ValidationDetail] = []
    for field, required, walk in _plan(msg.DESCRIPTOR):
        if required and (violation := proto_utils._check_required_field_violation(msg, field)):
            errors.append(violation)
        if walk == "one":
            if msg.HasField(field.name):
                nested = missing_required(getattr(msg, field.name))
                proto_utils._append_nested_errors(errors, field.name, nested)
        elif walk == "map":
            for key, value in getattr(msg, field.name).items():
                if isinstance(value, Message):
                    nested = missing_required(value)
                    proto_utils._append_nested_errors(errors, f"{field.name}[{key}]", nested)
        elif walk == "each":
            for i, item in enumerate(getattr(msg, field.name)):
                nested = missing_required(item)
                proto_utils._append_nested_errors(errors, f"{field.name}[{i}]", nested)
    return errors


if applies(REQUIRED_FIELDS_MEND):
    proto_utils._validate_proto_required_fields_internal = missing_required
