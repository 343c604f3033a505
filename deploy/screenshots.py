"""Pictures of the operator console for the docs, taken in a real browser by its tests.

``python -m deploy.screenshots [--out docs/img]`` runs the console's browser tests
(``tests/test_console.py``) with ``CONSOLE_SHOTS=DIR``: the tests drive a real gateway
(fake engines, Redis) through its console in headless Chromium, and take
``console-tiers.png`` (tiers, replicas, live numbers, fallbacks) and
``console-rules-diff.png`` (a rules upload's diff) on the way. The PNGs in ``docs/img``
are committed; rerun this after changing the console's look.

This module also starts the browser those tests drive: Debian's ``chromium`` through its
``chromedriver`` (``make browser`` installs both), headless, with a fresh profile and the
flags that keep it off the network (without them it waits on lookups on a machine with
no network).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib import request
from urllib.error import URLError

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parent.parent
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
SIZE = (1280, 900)


def browser_paths() -> tuple[str, str] | None:
    """Chromium's and chromedriver's paths, or None where either is missing."""
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chrome, driver) if chrome and driver else None


class ClosingService(Service):
    """chromedriver's service whose shutdown request closes its answer. Selenium's own
    ``send_remote_shutdown_command`` drops the ``urlopen`` response unread, leaving its
    socket to the garbage collector (an unclosed-socket ``ResourceWarning``)."""

    def send_remote_shutdown_command(self) -> None:
        try:
            with request.urlopen(f"{self.service_url}/shutdown", timeout=10) as r:
                r.read()
        except (URLError, TimeoutError, ConnectionError):
            return
        deadline = time.monotonic() + 10  # then stop() terminates the process
        while self.is_connectable() and time.monotonic() < deadline:
            time.sleep(0.05)


def chromium(profile: Path, size: tuple[int, int] = SIZE) -> webdriver.Chrome:
    """Headless Chromium with a fresh profile in ``profile``, driven through chromedriver."""
    paths = browser_paths()
    if paths is None:
        raise RuntimeError("chromium and chromedriver are not installed (make browser)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = paths[0]
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={size[0]},{size[1]}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=ClosingService(paths[1]))


def shoot(driver: webdriver.Chrome, path: Path) -> None:
    """A PNG of the whole page, beyond the window's height (Chrome's DevTools protocol)."""
    size = driver.execute_script(
        "const e = document.documentElement; return [e.scrollWidth, e.scrollHeight]"
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
        },
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.screenshots", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    env = {**os.environ, "CONSOLE_SHOTS": str(args.out.resolve()), "REQUIRE_BROWSER": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    cmd += ["tests/test_console.py", "-k", "tiers or diff"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
    for name in ("console-tiers.png", "console-rules-diff.png"):
        print(args.out / name)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
