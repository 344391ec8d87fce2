"""What tailagent changes in how a2a-sdk runs (mends/event_queues.py,
mends/tracing.py), each checked in a fresh interpreter, as a server process starts:
the SDK's queues are asyncio's and behave as the SDK expects of them; its tracing
wrappers are left out only when its tracing is off."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def run_python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_sdk_queues_are_asyncios_and_close_as_it_expects() -> None:
    out = run_python(
        """
        import asyncio, sys
        import tailagent.server
        from a2a.server.events.event_queue_v2 import EventQueueSource
        from a2a.types.a2a_pb2 import Message
        from a2a.utils._async_queue_compat import QueueShutDown

        async def main():
            source = EventQueueSource()
            sink = await source.tap()
            waiting = asyncio.ensure_future(sink.dequeue_event())
            await source.enqueue_event(Message(message_id="m1"))
            first = await waiting
            sink.task_done()
            blocked = asyncio.ensure_future(sink.dequeue_event())
            await asyncio.sleep(0)
            await source.close(immediate=True)
            closed = "still open"
            try:
                await asyncio.wait_for(blocked, 5)
            except QueueShutDown:
                closed = "closed"
            print(type(source.queue).__module__, first.message_id, closed,
                  "culsans" in sys.modules, "aiologic" in sys.modules)

        asyncio.run(main())
        """
    )
    if sys.version_info >= (3, 13):
        assert out == "asyncio.queues m1 closed False False"
    else:
        assert out == "backports.asyncio.queues.compat m1 closed False False"


TRACED = """
    from tailagent.mends.tracing import untraced_unless_enabled
    print(untraced_unless_enabled())
    import tailagent.server
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
    from a2a.server.events.event_queue_v2 import EventQueueSource
    print(EventQueueSource.enqueue_event.__code__.co_qualname)
    print(JsonRpcDispatcher._handle_send_message.__code__.co_qualname)
    print(untraced_unless_enabled())  # again, once the modules are in: as it was
"""


def test_the_sdk_tracing_wrappers_are_left_out_when_its_tracing_is_off() -> None:
    out = run_python(TRACED, OTEL_INSTRUMENTATION_A2A_SDK_ENABLED="false").splitlines()
    assert out == [
        "True",
        "EventQueueSource.enqueue_event",
        "JsonRpcDispatcher._handle_send_message",
        "True",
    ]


def test_the_sdk_tracing_wrappers_stay_when_its_tracing_is_on() -> None:
    pytest.importorskip("opentelemetry", reason="a2a-sdk traces only with opentelemetry")
    out = run_python(TRACED, OTEL_INSTRUMENTATION_A2A_SDK_ENABLED="true").splitlines()
    assert out == ["False", *["trace_function.<locals>.async_wrapper"] * 2, "False"]


def test_leaving_the_wrappers_out_too_late_is_refused_not_half_done() -> None:
    out = run_python(
        """
        import tailagent.server
        from tailagent.mends.tracing import untraced_unless_enabled
        try:
            untraced_unless_enabled()
        except RuntimeError as exc:
            print(exc)
        """,
        OTEL_INSTRUMENTATION_A2A_SDK_ENABLED="false",
    )
    assert out.startswith("too late to leave out a2a-sdk's tracing: a2a.")
