"""Thin helpers around the a2a-sdk client, so tests read as what a user does."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

JSONRPC, HTTP_JSON = "JSONRPC", "HTTP+JSON"


def user_message(
    text: str = "",
    *,
    task_id: str = "",
    context_id: str = "",
    data: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    message_id: str | None = None,
) -> Message:
    message = Message(
        message_id=message_id or uuid.uuid4().hex,
        role=Role.ROLE_USER,
        task_id=task_id,
        context_id=context_id,
    )
    if text:
        message.parts.append(Part(text=text))
    if data is not None:
        message.parts.append(Part(data=ParseDict(data, Value()), media_type="application/json"))
    if metadata:
        message.metadata.update(metadata)
    return message


def state_name(state: int) -> str:
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def kind_of(update: Any) -> str | None:
    """The `metadata.kind` of a status update event."""
    return MessageToDict(update.metadata).get("kind")


def data_parts(message: Message) -> list[dict[str, Any]]:
    return [MessageToDict(p.data) for p in message.parts if p.HasField("data")]


def texts(message: Message) -> str:
    return "".join(p.text for p in message.parts if p.HasField("text"))


@dataclass
class Turn:
    """Everything one streamed turn produced."""

    events: list[StreamResponse] = field(default_factory=list)

    @property
    def task_id(self) -> str:
        for event in self.events:
            if event.HasField("task"):
                return event.task.id
            if event.HasField("status_update"):
                return event.status_update.task_id
        raise AssertionError("no task in the stream")

    @property
    def context_id(self) -> str:
        for event in self.events:
            if event.HasField("task"):
                return event.task.context_id
        raise AssertionError("no task in the stream")

    @property
    def statuses(self) -> list[Any]:
        return [e.status_update for e in self.events if e.HasField("status_update")]

    @property
    def final_state(self) -> str:
        return state_name(self.statuses[-1].status.state)

    @property
    def last_message(self) -> Message:
        return self.statuses[-1].status.message

    @property
    def pending(self) -> dict[str, Any]:
        """The data part of the input-required prompt this turn ended on."""
        assert self.final_state == "input_required", self.final_state
        return data_parts(self.last_message)[0]

    def artifacts(self, artifact_id: str) -> list[Any]:
        return [
            e.artifact_update
            for e in self.events
            if e.HasField("artifact_update")
            and e.artifact_update.artifact.artifact_id == artifact_id
        ]

    def kinds(self) -> list[str | None]:
        return [kind_of(s) for s in self.statuses]


class A2A:
    """A user's view of one tailagent server."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        """A plain HTTP client that authenticates as this user."""
        return httpx.AsyncClient(headers=self.auth, **kwargs)

    @asynccontextmanager
    async def client(
        self, binding: str = JSONRPC, version: str = "1.0", streaming: bool = True
    ) -> AsyncIterator[Client]:
        headers = {"A2A-Version": "1.0"} if version == "1.0" else {}
        headers.update(self.auth)
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            config = ClientConfig(
                httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
            )
            if version == "1.0":
                client = await create_client(self.url, client_config=config)
            else:
                card = await A2ACardResolver(http, self.url).get_agent_card()
                legacy = AgentCard()
                legacy.CopyFrom(card)
                del legacy.supported_interfaces[:]
                legacy.supported_interfaces.extend(
                    i for i in card.supported_interfaces if i.protocol_version == version
                )
                client = await create_client(legacy, client_config=config)
            try:
                yield client
            finally:
                await client.close()

    async def turn(self, message: Message | str, **client_args: Any) -> Turn:
        if isinstance(message, str):
            message = user_message(message)
        turn = Turn()
        async with self.client(**client_args) as client:
            async for event in client.send_message(SendMessageRequest(message=message)):
                turn.events.append(event)
        return turn

    async def send(self, message: Message | str, **client_args: Any) -> StreamResponse:
        """A non-streaming SendMessage; returns its one response."""
        if isinstance(message, str):
            message = user_message(message)
        async with self.client(streaming=False, **client_args) as client:
            responses = [r async for r in client.send_message(SendMessageRequest(message=message))]
        assert len(responses) == 1
        return responses[0]

    async def get(self, task_id: str, **client_args: Any) -> Task:
        async with self.client(**client_args) as client:
            return await client.get_task(GetTaskRequest(id=task_id))

    async def list(self, **filters: Any) -> list[Task]:
        async with self.client() as client:
            response = await client.list_tasks(ListTasksRequest(**filters))
            return list(response.tasks)

    async def cancel(self, task_id: str, **client_args: Any) -> Task:
        async with self.client(**client_args) as client:
            return await client.cancel_task(CancelTaskRequest(id=task_id))

    async def subscribe(self, task_id: str) -> list[StreamResponse]:
        async with self.client() as client:
            return [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]
