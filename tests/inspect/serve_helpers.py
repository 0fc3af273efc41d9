"""Start a real ``theseus serve`` process and talk to it over HTTP."""

from __future__ import annotations

import http.client
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from tests.train.conftest import theseus_cmd


@contextmanager
def served(root: Path, *args: str) -> Iterator[str]:
    """The URL of ``theseus serve --root root *args`` while it runs (port 0: a free one)."""
    process = subprocess.Popen(
        theseus_cmd("serve", "--root", str(root), "--port", "0", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()  # "theseus serve: ROOT at URL"
        if " at http://" not in line:
            process.kill()
            raise AssertionError(f"theseus serve did not start: {line!r} {process.stderr.read()}")
        yield line.rsplit(" at ", 1)[1].strip()
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def request(
    url: str, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """One request with ``path`` sent exactly as written (no client-side normalisation of
    ``..`` or percent escapes, which a traversal test needs)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def get_json(url: str, path: str, status: int = 200, **headers: str) -> dict:
    code, _, body = request(url, path, headers)
    assert code == status, (path, code, body[:500])
    return json.loads(body)


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")
