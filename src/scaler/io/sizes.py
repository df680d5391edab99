"""Sizes in bytes as people write them (512M, 4G, 1.5GiB), for the settings that take one."""

from __future__ import annotations

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(size: str | int) -> int:
    """A number of bytes: an int, or text such as 512M, 4G, 1.5GiB, 2gb (powers of 1024). ValueError otherwise."""
    if isinstance(size, bool):
        raise ValueError(f"a size must be bytes or text like 4G, not {size!r}")
    if isinstance(size, int):
        value = size
    else:
        text = str(size).strip().lower().removesuffix("ib").removesuffix("b") if str(size).strip() else ""
        number, unit = (text[:-1], text[-1]) if text and text[-1] in "kmgt" else (text, "")
        try:
            value = int(float(number) * _SIZE_UNITS[unit])
        except ValueError:
            text = f"a size must be bytes or a number with K, M, G or T (like 512M or 4G), not {size!r}"
            raise ValueError(text) from None
    if value < 1:
        raise ValueError(f"a size must be positive, not {size!r}")
    return value
