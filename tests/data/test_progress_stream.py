"""Progress spinners draw on stderr; stdout holds only a command's result (issue 35).

Before: tokenizing drew its spinner line ("tokenizing python-stdlib (2 workers) 20 docs
...") on stdout, so ``theseus run data/tokenize/... > out`` captured it, twice wrapped.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path


def test_the_tokenize_spinner_draws_on_a_terminal_stderr_never_on_stdout(tmp_path: Path):
    leader, follower = pty.openpty()  # stderr is a terminal: the spinner is drawn there
    drawn: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the writer side closed
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    command = [sys.executable, "-m", "theseus.cli.main", "run", "data/tokenize/python-stdlib"]
    overrides = ["data.max_documents=10", "tokenizer.vocab_size=300", "--root", str(tmp_path)]
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120"}
    done = subprocess.run(
        [*command, *overrides], stdout=subprocess.PIPE, stderr=follower, env=env, timeout=600
    )
    os.close(follower)
    reader.join(timeout=10)
    os.close(leader)
    assert done.returncode == 0
    stdout = done.stdout.decode()
    assert (
        stdout == f"run data-tokenize-python-stdlib: {tmp_path}/runs/data-tokenize-python-stdlib\n"
    )
    assert "tokenizing python-stdlib (" in b"".join(drawn).decode(errors="replace")
