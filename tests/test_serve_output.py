"""What ``popagent serve`` prints in a terminal, and in a log (``cli.serve_output``).

In a terminal the server's output is for a person: the progress lines, ``ready
at URL``, no JSON, no line per request, and Ctrl-C (the terminal's, sent to the
whole process group, server processes included) ends it with ``stopped``. The
terminal is a real pseudo-terminal that is the server's controlling terminal,
so Ctrl-C is the byte a keyboard sends, turned into SIGINT by the kernel.
Elsewhere (a pipe) the log is JSON lines with access lines, as before.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pty
import re
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from popagent.cli.serve_output import HumanFormatter, ServeOutput
from tests.fault_support import clean_env
from tests.web_support import cli_command, free_port, wait_healthy

#: The most a busy machine may take to start two server processes on a running database.
START_S = 180


class Terminal:
    """A pseudo-terminal that is a process's controlling terminal; what it showed."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self._shown = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the last process holding the terminal ended
                return
            if not chunk:
                return
            with self._lock:
                self._shown += chunk

    def start(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            args,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            env=env,
            start_new_session=True,  # a session of its own, whose terminal this is
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(self.slave)
        self._reader.start()
        return process

    def lines(self) -> list[str]:
        """What the terminal showed, line by line (a terminal ends lines with CR LF)."""
        with self._lock:
            text = self._shown.decode(errors="replace")
        return [line for line in re.split(r"[\r\n]+", text) if line]

    def wait_for(self, text: str, process: subprocess.Popen[bytes], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not any(text in line for line in self.lines()):
            assert process.poll() is None, "\n".join(self.lines())
            assert time.monotonic() < deadline, f"no {text!r} in {seconds} s:\n" + "\n".join(
                self.lines()
            )
            time.sleep(0.1)

    def type_ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def close(self) -> None:
        self._reader.join(timeout=30)
        os.close(self.master)


@contextmanager
def serve_in_terminal(
    env: dict[str, str], *args: str
) -> Iterator[tuple[Terminal, subprocess.Popen[bytes], str]]:
    port = free_port()
    terminal = Terminal()
    process = terminal.start(
        cli_command("serve", "--port", str(port), "--maintenance-interval", "0", *args), env
    )
    try:
        yield terminal, process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        terminal.close()


def _env(tmp_path: Path, database_url: str) -> dict[str, str]:
    return clean_env(
        tmp_path,
        POPAGENT_DATABASE_URL=database_url,
        POPAGENT_EMBEDDER="none",
        POPAGENT_RESOURCE_ID="terminal-test",
    )


def test_in_a_terminal_serve_prints_human_lines_and_stops_on_ctrl_c(
    database_url: str, tmp_path: Path
) -> None:
    with serve_in_terminal(_env(tmp_path, database_url), "--workers", "2") as (
        terminal,
        process,
        base,
    ):
        terminal.wait_for("ready at", process, START_S)
        created = httpx.post(f"{base}/api/facts", json={"content": "Waters the ferns"}, timeout=30)
        assert created.status_code == 201
        terminal.type_ctrl_c()
        assert process.wait(timeout=120) == 0
    lines = terminal.lines()
    shown = "\n".join(lines)
    assert f"popagent serve: ready at {base}/ (the web GUI and the API; Ctrl-C stops)" in lines
    assert lines[-1] == "popagent serve: stopped", shown
    assert not [line for line in lines if line.lstrip("^C").startswith("{")], shown
    assert "/api/facts" not in shown  # no access lines unless asked for
    assert "Uvicorn running" not in shown and "Application startup" not in shown
    assert "Traceback" not in shown and "Aborted" not in shown
    # Every line is a progress line of this command, or the echoed Ctrl-C.
    assert all(line.startswith(("popagent serve: ", "^C")) for line in lines), shown


def test_in_a_terminal_json_and_access_lines_are_asked_for(
    database_url: str, tmp_path: Path
) -> None:
    env = _env(tmp_path, database_url)
    args = ("--workers", "1", "--log-format", "json")
    with serve_in_terminal(env, *args) as (terminal, process, base):
        terminal.wait_for("ready at", process, START_S)
        assert httpx.get(f"{base}/api/facts", timeout=30).status_code == 200
        terminal.wait_for('"path": "/api/facts"', process, 60)
        terminal.type_ctrl_c()
        assert process.wait(timeout=120) == 0
    lines = terminal.lines()
    logged = [json.loads(line[line.index("{") :]) for line in lines if "{" in line]
    assert {"uvicorn.error", "popagent.access"} <= {entry["logger"] for entry in logged}
    assert lines[-1] == "popagent serve: stopped"

    with serve_in_terminal(env, "--workers", "1", "--access-log") as (terminal, process, base):
        terminal.wait_for("ready at", process, START_S)
        assert httpx.get(f"{base}/api/facts", timeout=30).status_code == 200
        terminal.wait_for("GET /api/facts 200 (", process, 60)  # a human access line
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    assert terminal.lines()[-1] == "popagent serve: stopped"


def test_not_a_terminal_the_log_is_json_lines(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        cli_command("serve", "--port", str(port), "--workers", "1"),
        env=_env(tmp_path, database_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_healthy(base, process)
        assert httpx.get(f"{base}/api/facts", timeout=30).status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    logged = [json.loads(line) for line in stderr.splitlines()]  # every line: JSON
    assert any(e["logger"] == "popagent.access" and e["path"] == "/api/facts" for e in logged)
    assert any(e["logger"] == "uvicorn.error" for e in logged)
    assert stdout.splitlines()[-1] == "popagent serve: stopped"
    assert all(line.startswith("popagent serve: ") for line in stdout.splitlines())


def test_human_lines_say_the_level_the_fields_and_the_traceback() -> None:
    formatter = HumanFormatter()
    record = logging.LogRecord(
        "popagent.maintenance", logging.INFO, "", 0, "maintenance ran", (), None
    )
    record.expired_facts = 2
    assert formatter.format(record).endswith(" maintenance ran (expired facts 2)")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord(
            "popagent.web", logging.ERROR, "", 0, "request failed: %s", ("X",), sys.exc_info()
        )
    text = formatter.format(failed)
    assert re.match(r"\d\d:\d\d:\d\d error: request failed: X\nTraceback", text), text
    assert text.endswith("RuntimeError: boom")
    assert ServeOutput.choose("human", None) == ServeOutput("human", False)
    assert ServeOutput.choose("json", None) == ServeOutput("json", True)
    assert ServeOutput.choose("human", True).access_log
