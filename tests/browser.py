"""A real headless browser for the tests: Debian's chromium driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: JSON messages ending in NUL on file descriptors 3 and 4), so no driver
package and no listening port are needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class Browser:
    """One headless chromium; `page_text(url, wanted)` loads a page and returns its visible text once it
    shows every wanted string (or at the time limit)."""

    def __init__(self, profile: Path) -> None:
        executable = shutil.which("chromium")
        if executable is None:
            raise FileNotFoundError("chromium")
        to_browser, self._to = os.pipe()
        self._from, from_browser = os.pipe()

        def descriptors() -> None:  # in the child: the protocol's fds 3 (commands in) and 4 (replies out)
            read, write = os.dup(to_browser), os.dup(from_browser)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [
                executable,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            close_fds=False,
            preexec_fn=descriptors,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(profile)},  # its scratch directories go with the profile
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next = b"", 0

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def page_text(self, url: str, wanted: Sequence[str], timeout: float = 60.0) -> str:
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        deadline, text = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            evaluated = self.call(
                "Runtime.evaluate",
                {"expression": "document.body ? document.body.innerText : ''", "returnByValue": True},
                session,
            )
            text = evaluated["result"].get("value", "")
            if all(w in text for w in wanted):
                break
            time.sleep(0.5)
        self.call("Target.closeTarget", {"targetId": target})
        return text

    def close(self) -> None:
        try:
            self.call("Browser.close")  # chromium's own shutdown: it removes what it made
            self.process.wait(timeout=30)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        os.close(self._to)
        os.close(self._from)
