"""Plain data over a socket: what may cross between the grader and a learner's worker.

Only these cross: ``None``, bools, ints, floats, complex numbers, strings, bytes, paths, NumPy arrays and
NumPy scalars of a number dtype, and lists, tuples and dicts (string keys) of these. Everything else is
refused when encoding. Arrays travel as ``.npy`` bytes and are loaded with ``allow_pickle=False``; the
decoder builds only the types above, from JSON, and never calls anything the other side defined. An
object whose ``__eq__`` always answers True therefore cannot reach the grader's comparison: the worker
can only send what JSON and ``.npy`` can say.

A message is a 4-byte big-endian length and then that many bytes of UTF-8 JSON, at most
:data:`MAX_MESSAGE_BYTES`, with at most :data:`MAX_ITEMS` JSON values (what the receiving side builds in
memory grows with the number of values, not with the bytes: a list of ten million small numbers is 20 MB of
JSON and half a gigabyte of Python objects). A trusted object that must stay on the grader's side (a
simulated network, a measuring function) is sent as a reference, ``{"$ref": body}``, whose body the
sending side chooses (the grader sends ``[n, [operations...]]``, the worker answers with ``n``); see
:mod:`mlsys_lab.course.checks` for what the worker may do with one.
"""

from __future__ import annotations

import base64
import io
import json
import pathlib
import socket
import struct
from typing import Any

import numpy as np

# Arrays travel as base64 .npy strings: 192 MiB carry 150 MB of data, the timed case of a kernel exercise (2^25
# float32, 128 MiB). What one exercise's worker may send in all is bounded separately (checks.MAX_RECEIVED_BYTES).
MAX_MESSAGE_BYTES = 192 * 1024 * 1024
MAX_ITEMS = 1_000_000  # JSON values per message (numbers, strings, lists...): bounds what the receiver builds
NUMBER_KINDS = "biufc"  # bool, int, unsigned, float, complex: no object, string or void dtypes


class NotPlainData(TypeError):
    """A value that is not plain data was asked to cross."""


def _array_bytes(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def encode(value: Any, ref: Any = None) -> Any:
    """``value`` as JSON-ready plain data; ``ref(obj)`` gives the reference body of an object that stays
    behind (it raises :class:`NotPlainData` for one that may not); without ``ref`` such objects are refused."""
    if value is None or type(value) in (bool, int, float, str):
        if type(value) is float and not np.isfinite(value):
            return {"$float": repr(value)}
        return value
    if type(value) is complex:
        return {"$complex": [value.real, value.imag]}
    if type(value) is bytes:
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, pathlib.PurePath):
        return {"$path": str(value)}
    if isinstance(value, np.ndarray) and value.dtype.kind in NUMBER_KINDS:
        return {"$npy": _array_bytes(np.ascontiguousarray(value))}
    if isinstance(value, np.generic) and value.dtype.kind in NUMBER_KINDS:
        return {"$npscalar": _array_bytes(np.asarray(value))}
    if type(value) in (list, tuple):
        items = [encode(v, ref) for v in value]
        return items if type(value) is list else {"$tuple": items}
    if type(value) is dict and all(type(k) is str for k in value):
        return {"$dict": {k: encode(v, ref) for k, v in value.items()}}
    if ref is not None:
        return {"$ref": ref(value)}
    raise NotPlainData(f"a {type(value).__name__} is not plain data (numbers, strings, bools, None, "
                       "NumPy arrays, and lists/tuples/dicts of these)")


def _load_array(text: str) -> np.ndarray:
    array = np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False)
    if array.dtype.kind not in NUMBER_KINDS:
        raise NotPlainData(f"an array of dtype {array.dtype} is not plain data")
    return array


def decode(data: Any, deref: Any = None) -> Any:
    """Rebuild plain data from :func:`encode`'s form; ``deref(n)`` resolves references (else refused)."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, deref) for v in data]
    if type(data) is dict and len(data) == 1:
        (tag, body), = data.items()
        if tag == "$tuple" and type(body) is list:
            return tuple(decode(v, deref) for v in body)
        if tag == "$dict" and type(body) is dict:
            return {str(k): decode(v, deref) for k, v in body.items()}
        if tag == "$npy" and type(body) is str:
            return _load_array(body)
        if tag == "$npscalar" and type(body) is str:
            return _load_array(body)[()]
        if tag == "$bytes" and type(body) is str:
            return base64.b64decode(body, validate=True)
        if tag == "$path" and type(body) is str:
            return pathlib.Path(body)
        if tag == "$float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "$complex" and type(body) is list and len(body) == 2:
            return complex(float(body[0]), float(body[1]))
        if tag == "$ref" and deref is not None:
            return deref(body)  # the receiving side validates the body
    raise NotPlainData(f"not plain data: {str(data)[:80]}")


def send_message(sock: socket.socket, message: dict) -> None:
    """Send one JSON message (already plain: encode its values first)."""
    body = json.dumps(message, allow_nan=False).encode("utf-8")
    sock.sendall(struct.pack(">I", len(body)) + body)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive_message(sock: socket.socket, sizes: list[int] | None = None) -> dict:
    """Receive one JSON message; a malformed or oversized one raises ``NotPlainData``. ``sizes``, when given,
    gets the message's length appended (before it is read: a budget counts what the sender announced)."""
    (length,) = struct.unpack(">I", _read_exactly(sock, 4))
    if sizes is not None:
        sizes.append(length)
    if length > MAX_MESSAGE_BYTES:
        raise NotPlainData(f"a message of {length} bytes is over the {MAX_MESSAGE_BYTES} byte limit")
    body = _read_exactly(sock, length)
    items = body.count(b",") + body.count(b":") + 1  # an upper bound on the JSON values (base64 has neither)
    if items > MAX_ITEMS:
        raise NotPlainData(f"a message of about {items} values is over the {MAX_ITEMS} value limit "
                           "(send arrays, not lists of numbers)")
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotPlainData(f"a message that is not JSON: {exc}") from None
    if type(message) is not dict:
        raise NotPlainData("a message must be a JSON object")
    return message
