"""A small Chrome DevTools Protocol client for the HTML report's tests: headless
Chromium started with a debugging port, one page driven over its websocket (navigate,
evaluate, real mouse and key input, screenshots)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import websocket

#: the HTML report's page is drawn (its timeline included)
READY = "document.documentElement.getAttribute('data-tl-ready')"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--remote-debugging-port=0",
         "--remote-allow-origins=*"]


class Page:
    """One Chromium page; ``call`` sends a command and returns its result."""

    def __init__(self, chromium: str, width: int = 1400, height: int = 1000, timeout: float = 60):
        self.dir = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        self.proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={self.dir.name}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "TMPDIR": self.dir.name})  # its temporary files too
        port_file = Path(self.dir.name) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its debugging port")
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout)
        self.next_id = 0
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expr: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def open(self, path: Path, ready: str, timeout: float = 60) -> None:
        """Navigate to ``path`` and wait until the JavaScript ``ready`` is true."""
        self.call("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + timeout
        while not self.eval(f"(function () {{ try {{ return !!({ready}); }} catch (e) {{ return false; }} }})()"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}: {ready} never held")
            time.sleep(0.05)

    def mouse(self, kind: str, x: float, y: float, **extra: Any) -> None:
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    def key(self, key: str) -> None:
        code = f"Key{key.upper()}" if key.isalpha() else f"Digit{key}"
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=key, code=code, text=key if kind == "keyDown" else "",
                      windowsVirtualKeyCode=ord(key.upper()))

    def screenshot(self, png: Path, clip: dict[str, float]) -> Path:
        data = self.call("Page.captureScreenshot", format="png", clip={**clip, "scale": 1})["data"]
        png.write_bytes(base64.b64decode(data))
        return png

    def close(self) -> None:
        try:
            if hasattr(self, "ws"):
                self.ws.close()
        finally:
            self.proc.terminate()  # chromium ends its own helpers, then exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.dir.cleanup()


@contextlib.contextmanager
def report_page(path: Path) -> Iterator[Page]:
    """The HTML report at ``path`` open in a new headless Chromium, drawn, with no script
    error; closed after."""
    from analysis.browser import chromium

    page = Page(chromium())
    try:
        page.open(path, READY)
        assert page.eval("window.__errors.length") == 0
        yield page
    finally:
        page.close()
