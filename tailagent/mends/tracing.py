"""a2a-sdk's tracing decorators, left off when its tracing is off.

a2a-sdk wraps its request path (the JSON-RPC and REST dispatchers, the request
handler, the task manager, the event queues) in `trace_function` wrappers at import
time, and keeps them when `OTEL_INSTRUMENTATION_A2A_SDK_ENABLED` is false: each call
then opens and closes a no-op span, logs a debug line and re-raises through two
handlers. On a streamed send that costs the server ~6 % more CPU, ~2 % on a blocking
one (docs/measured.md, issue 36), for nothing. `untraced_unless_enabled`, called
before any of those modules is imported, turns the decorators into pass-throughs when
the SDK's own switch says tracing is off; when it is on, it changes nothing. Written
for a2a-sdk 1.3.0's decorators; on another version they stay as they are (mends/versions.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from tailagent.mends.versions import Mend, applies

T = TypeVar("T")

# The packages whose modules decorate at import time; once one is in, it is too late.
DECORATING = ("a2a.server", "a2a.client", "a2a.compat")
TRACING_MEND = Mend(
    what="a2a-sdk's tracing wrappers left out while its tracing is off (mends/tracing.py)",
    dist="a2a-sdk",
    written_for=("1.3.0",),
    without="each call still opens a no-op span (a stream costs ~6 % more CPU)",
)


def _unchanged_function(func: Callable[..., Any] | None = None, **_: Any) -> Any:
    """`trace_function`'s two forms (`@trace_function` and `@trace_function(...)`)."""
    if func is None:
        return lambda inner: inner
    return func


def _unchanged_class(*_: Any, **__: Any) -> Callable[[T], T]:
    """`trace_class(...)`, which is always called with its options first."""
    return lambda cls: cls


def untraced_unless_enabled() -> bool:
    """Leaves a2a-sdk's tracing wrappers out of the modules imported from now on,
    unless its tracing is on; says whether it did. Refuses, rather than half-apply,
    once a decorated module is in: its classes are wrapped already."""
    if not applies(TRACING_MEND):
        return False
    from a2a.utils import telemetry

    if telemetry.otel_installed and telemetry.otel_enabled:
        return False
    if telemetry.trace_function is _unchanged_function:
        return True  # done before
    already = sorted(
        name for name, module in sys.modules.items() if module and name.startswith(DECORATING)
    )
    if already:
        raise RuntimeError(f"too late to leave out a2a-sdk's tracing: {already[0]} is in")
    telemetry.trace_function = _unchanged_function
    telemetry.trace_class = _unchanged_class
    return True
