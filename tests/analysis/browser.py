"""Headless Chromium helpers for the HTML report tests: DOM dump, console log, screenshot."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def page_data(html: Path) -> dict:
    """The data an HTML report embeds (``<script type="application/json" id="data">``)."""
    text = html.read_text(encoding="utf-8")
    start = text.index(">", text.index('id="data"')) + 1
    return json.loads(text[start:text.index("</script>", start)])


def chromium() -> str | None:
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name) or (name if Path(name).is_file() else None)
        if path:
            return path
    return None


def _run(args: list[str], timeout: float, text: bool = False) -> subprocess.CompletedProcess:
    """Chromium with its profile and temporary files in a folder removed after it (else
    each run leaves an org.chromium.Chromium.* folder in /tmp)."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as d:
        return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={d}", *args], capture_output=True,
                              text=text, timeout=timeout, env={**os.environ, "TMPDIR": d})


def dump_dom(html: Path, timeout: float = 90) -> tuple[str, str]:
    """(DOM after scripts ran, chromium's stderr with the page's console messages)."""
    p = _run(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
              html.resolve().as_uri()], timeout, text=True)
    return p.stdout, p.stderr


def screenshot(html: Path, png: Path, width: int = 1400, height: int = 1800, scale: float = 0.5,
               timeout: float = 90) -> Path:
    """A PNG of the page; ``scale`` < 1 makes it smaller (and quicker to decode here)."""
    _run([f"--window-size={width},{height}", "--virtual-time-budget=5000", f"--force-device-scale-factor={scale}",
          f"--screenshot={png.resolve()}", html.resolve().as_uri()], timeout)
    return png


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB/RGBA PNG, without Pillow."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = 0
    color = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), f"unsupported PNG depth {depth} color {color}"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 4 if color == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows
