"""What a dispatch config value must look like when it is a host, a name or a word.

Every value of a target reaches somewhere: a generated script, a command line, a remote
shell, a Kubernetes manifest or an API's URL. A path or a free text (``root``, ``workdir``,
``env`` values) may hold any character but a control character: it is data, written as one
quoted shell word (:mod:`theseus.dispatch.script_values`). A value that names a host, a
user, a port or a cloud object cannot hold a shell's metacharacters at all, so one that does
is refused in one line when the config is read, naming the key and what it must be
(:func:`shape_problem`). A field declares its shape in its metadata (``shape=...``).
"""

from __future__ import annotations

import re

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
_RESOURCE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,251}[A-Za-z0-9])?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")
_QUANTITY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+|[A-Za-z]{1,2})?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_EXPECTED = {
    "host": "a host name or IPv4 address, optionally user@ before it and :port after it "
    "(port 1 to 65535)",
    "user": "a user name (letters, digits, '_', '.', '-'; not starting with a digit)",
    "name": "a name (letters, digits, '.', '_', '-'; starting and ending with a letter or digit)",
    "resource": "a resource name such as nvidia.com/gpu (letters, digits, '.', '_', '-', '/')",
    "image": "a container image reference (letters, digits and . _ / : @ + -)",
    "quantity": "a Kubernetes quantity such as 16, 500m or 64Gi",
    "env_name": "an environment variable name (letters, digits, '_'; not starting with a digit)",
}
SHAPES = tuple(_EXPECTED)


def expected(shape: str) -> str:
    """What a value of ``shape`` must be, in words."""
    return _EXPECTED[shape]


def _host_problem(value: str) -> bool:
    user, at, rest = value.rpartition("@")
    host, colon, port = rest.partition(":")
    if at and not _USER.match(user):
        return True
    if colon and not (port.isdigit() and 1 <= int(port) <= 65535):
        return True
    return not _HOSTNAME.match(host)


def fits(shape: str, value: str) -> bool:
    """Whether ``value`` has ``shape`` (one of :data:`SHAPES`)."""
    if shape == "host":
        return not _host_problem(value)
    pattern = {
        "user": _USER,
        "name": _NAME,
        "resource": _RESOURCE,
        "image": _IMAGE,
        "quantity": _QUANTITY,
        "env_name": _ENV_NAME,
    }[shape]
    return bool(pattern.match(value))


def shape_problem(shape: str, value: object) -> str | None:
    """``"must be <what>, got <value>"`` when the string ``value`` does not have ``shape``;
    None when it does (or is not a string: the type check names that)."""
    if not isinstance(value, str) or fits(shape, value):
        return None
    return f"must be {expected(shape)}, got {value!r}"
