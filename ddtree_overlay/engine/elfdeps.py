"""Which shared libraries an ELF file asks for (its DT_NEEDED entries), in pure Python."""

from __future__ import annotations

import struct
from pathlib import Path

_SHT_DYNAMIC = 6
_DT_NEEDED = 1


def needed_libraries(path: Path) -> tuple[str, ...]:
    """DT_NEEDED names of `path`, or () when it is not a readable ELF file."""
    try:
        data = path.read_bytes()
    except OSError:
        return ()
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return ()
    is_64 = data[4] == 2
    endian = "<" if data[5] == 1 else ">"
    try:
        return tuple(_needed(data, is_64=is_64, endian=endian))
    except (struct.error, IndexError, UnicodeDecodeError):
        return ()


def _needed(data: bytes, *, is_64: bool, endian: str) -> list[str]:
    if is_64:
        shoff, shentsize, shnum = struct.unpack_from(endian + "Q10xHH", data, 0x28)
        section = endian + "IIQQQQIIQQ"
        dyn, dyn_size = endian + "qQ", 16
    else:
        shoff, shentsize, shnum = struct.unpack_from(endian + "I10xHH", data, 0x20)
        section = endian + "IIIIIIIIII"
        dyn, dyn_size = endian + "iI", 8
    sections = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for _, kind, _, _, offset, size, link, *_ in sections:
        if kind != _SHT_DYNAMIC:
            continue
        strtab_offset = sections[link][4]
        for entry in range(offset, offset + size, dyn_size):
            tag, value = struct.unpack_from(dyn, data, entry)
            if tag == _DT_NEEDED:
                names.append(_c_string(data, strtab_offset + value))
    return names


def _c_string(data: bytes, start: int) -> str:
    return data[start : data.index(b"\0", start)].decode()
