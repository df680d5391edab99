"""What libzmq knows of a received frame, on both pyzmq backends: frame_get(frame, property) (zmq.SRCFD, "User-Id")
and frame_more(frame) (more frames of its message follow).

On CPython, pyzmq's Cython backend answers: frame_get is zmq.Frame.get itself, called unbound (no cost added), and
frame_more reads Frame.more. PyPy has pyzmq's CFFI backend, whose frames have no get() (pyzmq 27:
NotImplementedError) and whose Frame.more stays False: there both ask libzmq (zmq_msg_get, zmq_msg_gets,
zmq_msg_more) through cffi, on the libzmq pyzmq loaded. Either way an int property gives an int, a str one a str,
and a property the message lacks raises zmq.ZMQError.
"""

from __future__ import annotations

import importlib
import operator
from collections.abc import Callable
from typing import Any

import zmq
import zmq.backend

_DECLARATIONS = """
int zmq_msg_get(void *msg, int property);
const char *zmq_msg_gets(void *msg, const char *property);
int zmq_msg_more(void *msg);
"""


def cffi_backend() -> bool:
    """Whether pyzmq runs on its CFFI backend (PyPy)."""
    return zmq.backend.Frame.__module__.startswith("zmq.backend.cffi")


def _loaded_libzmq() -> str:
    """The path of the libzmq this process loaded (pyzmq's own copy or the system's): the one to call."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rsplit(None, 1)[-1]
            if "/libzmq" in path:
                return path
    raise ImportError("the libzmq pyzmq loaded is not in /proc/self/maps: frame properties cannot be read")


def _cffi_readers() -> tuple[Callable[[Any, int | str], int | str], Callable[[Any], bool]]:
    ffi = importlib.import_module("cffi").FFI()  # PyPy has cffi built in
    ffi.cdef(_DECLARATIONS)
    lib = ffi.dlopen(_loaded_libzmq())
    null, cast, string = ffi.NULL, ffi.cast, ffi.string

    def frame_get(frame: Any, option: int | str) -> int | str:
        msg = cast("void *", cast("uintptr_t", frame.zmq_msg))  # the frame's zmq_msg_t, from pyzmq's own ffi
        if isinstance(option, int):
            value: int = lib.zmq_msg_get(msg, option)
            if value == -1:
                raise zmq.ZMQError(ffi.errno)
            return value
        text = lib.zmq_msg_gets(msg, option.encode())
        if text == null:
            raise zmq.ZMQError(ffi.errno)
        return str(string(text).decode())

    def frame_more(frame: Any) -> bool:
        return bool(lib.zmq_msg_more(cast("void *", cast("uintptr_t", frame.zmq_msg))))

    return frame_get, frame_more


frame_get: Callable[[Any, int | str], Any]
frame_more: Callable[[Any], bool]
if cffi_backend():
    frame_get, frame_more = _cffi_readers()
else:
    frame_get, frame_more = zmq.Frame.get, operator.attrgetter("more")


def user_id(frame: Any) -> str:
    """The ZAP user id (with keys, the public key in Z85) of the connection a message came over; "" if it has none."""
    try:
        return str(frame_get(frame, "User-Id"))
    except zmq.ZMQError:
        return ""
