"""The coordinator's ``HOST:PORT`` of a multi-process run, checked before JAX sees it.

JAX takes the address as it is: a missing port is an ``IndexError`` inside it, a port that is
not a number makes its server crash the process (SIGSEGV), and a host it cannot reach makes
every process wait 300 s. `address_problem` says what is wrong with the text (no import of
JAX, so the command line checks it at once); `resolve_problem` asks the system's resolver
whether the host exists.

Example:
    >>> from nnx_plugins.training._address import address_problem, split_address
    >>> split_address("[::1]:5555"), split_address("10.0.0.1:1234")
    (('::1', 5555), ('10.0.0.1', 1234))
    >>> address_problem("localhost:abc")
    "the port 'abc' is not a number; give a port from 1 to 65535, e.g. localhost:5555"
"""

from __future__ import annotations

import ipaddress
import re
import socket

__all__ = ["address_problem", "split_address", "resolve_problem"]

_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)\Z")


def split_address(text: str) -> tuple[str, int]:
    """``(host, port)`` of a valid address (see `address_problem`); IPv6 without brackets.

    Raises:
        ValueError: the address is not valid (the message says why).
    """
    problem = address_problem(text)
    if problem is not None:
        raise ValueError(problem)
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def address_problem(text: str) -> str | None:
    """What is wrong with ``text`` as ``HOST:PORT``, or ``None`` when it is valid.

    HOST is a host name, an IPv4 address or an IPv6 address in brackets (``[::1]``); PORT is a
    whole number from 1 to 65535.
    """
    if not text.strip():
        return "it is empty; give process 0's host and a free port, e.g. localhost:5555"
    if text.startswith("["):
        host, close, port = text[1:].partition("]")
        if not close or not port.startswith(":"):
            return "an IPv6 address in brackets is followed by ':PORT', e.g. [::1]:5555"
        return _ipv6_problem(host) or _port_problem(port[1:], f"[{host}]")
    host, colon, port = text.rpartition(":")
    if not colon:
        return f"there is no port (no ':'); give HOST:PORT, e.g. {text[:40]}:5555"
    if ":" in host:
        return "an IPv6 address goes in brackets, e.g. [::1]:5555 (a host name has no ':')"
    return _host_problem(host) or _port_problem(port, host)


def _ipv6_problem(host: str) -> str | None:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return f"[{host[:40]}] is not an IPv6 address; write e.g. [::1]:5555 or [fe80::1]:5555"
    return None


def _host_problem(host: str) -> str | None:
    if not host:
        return "the host is missing before ':'; give e.g. localhost:5555"
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        return (
            f"{host[:40]!r} is not a host name or IPv4 address (letters, digits, '-' and '.' "
            "only); give e.g. localhost:5555 or 10.0.0.1:5555"
        )
    return None


def _port_problem(port: str, host: str) -> str | None:
    if not (port.isascii() and port.isdigit()):
        return (
            f"the port {port[:20]!r} is not a number; give a port from 1 to 65535, e.g. "
            f"{host[:40]}:5555"
        )
    if not 1 <= int(port) <= 65535:
        return f"the port {int(port)} is out of range; give a port from 1 to 65535"
    return None


def resolve_problem(host: str, port: int) -> str | None:
    """Why the system cannot resolve ``host`` (a host name no process could reach), or
    ``None`` when it resolves."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        return f"the host {host!r} cannot be resolved ({reason}); check its name, or use its IP"
    return None
