"""A headless Chromium driven over the DevTools protocol, for testing the HTML report as people see it.

Chromium is Debian's ``chromium`` package (``make browser`` installs it); the websocket client is the
``websocket-client`` dev dependency. ``Page.open`` records every network request the page makes, every
console message and uncaught exception, and every JavaScript dialog (``alert``) that opens.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def why_no_browser() -> str | None:
    """None when the browser tests can run, else the reason to skip them."""
    if find_chromium() is None:
        return "chromium not found (run `make browser`, or apt-get install chromium)"
    try:
        import websocket  # noqa: F401
    except ImportError:
        return "websocket-client not installed (pip install -e '.[dev]')"
    return None


@dataclass
class PageLog:
    requests: list[str] = field(default_factory=list)
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    exceptions: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [t for level, t in self.console if level in ("error", "assert")] + self.exceptions


class Browser:
    """One Chromium process; ``with Browser() as b: log = b.open(path)``."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        exe = find_chromium()
        assert exe is not None
        self._profile = tempfile.mkdtemp(prefix="aiprof-chromium-")
        self.proc = subprocess.Popen(
            [
                exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--remote-debugging-port=0", f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}", "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ws_url = self._page_ws_url(self._browser_port())
        import websocket

        self.ws = websocket.create_connection(self.ws_url, timeout=30, suppress_origin=True)
        self._id = 0
        self._events: list[dict[str, Any]] = []

    def _browser_port(self) -> int:
        deadline = time.monotonic() + 30
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        raise RuntimeError("chromium did not start its DevTools endpoint")

    def _page_ws_url(self, port: int) -> str:
        from urllib.request import urlopen

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:  # the harness, not the page
                pages = [t for t in json.loads(resp.read()) if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.1)
        raise RuntimeError("chromium has no page target")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        my_id = self._id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})  # type: ignore[no-any-return]
            if "method" in msg:
                self._events.append(msg)

    def _wait_for(self, method: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        if any(e["method"] == method for e in self._events):
            return
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self._events.append(msg)
                if msg["method"] == method:
                    return
        raise TimeoutError(method)

    def open(self, path: Path, settle_s: float = 0.5) -> PageLog:
        """Load a file and return what the page did while loading (plus ``settle_s`` after)."""
        self._events.clear()
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable")
        # A dialog would block the page: record it and dismiss it.
        self.send("Page.navigate", url=path.resolve().as_uri())
        self._wait_for("Page.loadEventFired")
        end = time.monotonic() + settle_s
        self.ws.settimeout(0.1)
        try:
            while time.monotonic() < end:
                try:
                    msg = json.loads(self.ws.recv())
                except Exception:  # noqa: BLE001 - a receive timeout just means "nothing new"
                    continue
                if "method" in msg:
                    self._events.append(msg)
                    if msg["method"] == "Page.javascriptDialogOpening":
                        self.ws.send(json.dumps({"id": 10**6, "method": "Page.handleJavaScriptDialog", "params": {"accept": True}}))
        finally:
            self.ws.settimeout(30)
        return self._log()

    def _log(self) -> PageLog:
        log = PageLog()
        for e in self._events:
            p = e.get("params", {})
            if e["method"] == "Network.requestWillBeSent":
                log.requests.append(p["request"]["url"])
            elif e["method"] == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                log.console.append((p.get("type", ""), text))
            elif e["method"] == "Log.entryAdded":
                log.console.append((p["entry"].get("level", ""), p["entry"].get("text", "")))
            elif e["method"] == "Runtime.exceptionThrown":
                log.exceptions.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif e["method"] == "Page.javascriptDialogOpening":
                log.dialogs.append(str(p.get("message")))
        return log

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(str(result["exceptionDetails"]))
        return result["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = True, dark: bool = False) -> Path:
        self.send(
            "Emulation.setEmulatedMedia",
            features=[{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}],
        )
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def install_sentinel(browser: Browser) -> None:
    """Before any page script: record calls to alert/confirm/prompt in a global the test can read."""
    browser.send("Page.enable")
    browser.send(
        "Page.addScriptToEvaluateOnNewDocument",
        source=(
            "window.__aiprof_xss = [];"
            "for (const f of ['alert','confirm','prompt']) {"
            "  const orig = window[f]; window[f] = function(...a){ window.__aiprof_xss.push(f + ':' + a.join(',')); };"
            "}"
        ),
    )

