"""The owner of a loopback connection: the kernel's answer (netlink) and the /proc
fallback (for units that forbid netlink) must agree, on IPv4 and IPv6."""

from __future__ import annotations

import os
import socket

import pytest

from tailagent.access.peercred import _owner_by_netlink, _owner_by_proc, connection_owner


@pytest.mark.parametrize(("family", "host"), [(socket.AF_INET, "127.0.0.1"),
                                              (socket.AF_INET6, "::1")])  # fmt: skip
def test_netlink_and_proc_name_the_same_owner(family: int, host: str) -> None:
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        with socket.create_connection(server.getsockname()[:2]) as client:
            ends = (client.getsockname()[:2], server.getsockname()[:2])
            assert _owner_by_netlink(*ends) == _owner_by_proc(*ends) == os.getuid()
            assert connection_owner(*ends) == os.getuid()
        stranger = ((host, 1), server.getsockname()[:2])  # no socket has these addresses
        assert _owner_by_netlink(*stranger) is None and _owner_by_proc(*stranger) is None


def test_where_netlink_is_refused_proc_answers_and_netlink_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tailagent.access import peercred

    opened: list[int] = []
    real_socket = socket.socket

    def refusing(family: int = -1, *args: object) -> socket.socket:
        if family == socket.AF_NETLINK:
            opened.append(family)
            raise PermissionError("AF_NETLINK not allowed here")
        return real_socket(family, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(peercred, "_netlink_refused", False)
    monkeypatch.setattr(peercred.socket, "socket", refusing)
    with real_socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()[:2]) as client:
            ends = (client.getsockname()[:2], server.getsockname()[:2])
            assert connection_owner(*ends) == connection_owner(*ends) == os.getuid()
    assert len(opened) == 1
