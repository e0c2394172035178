"""The README's first minute, walked as a new user would, on a fresh copy of the tree.

The copy holds what a clone of this working tree would: its tracked and
untracked, not ignored files (``git ls-files -co --exclude-standard``; a real
``git clone`` would miss work not yet committed). In it, as the README says:

1. ``scripts/serve`` makes ``.venv``, installs popagent, starts PostgreSQL
   (initdb on this first run), and says each step; ``ready at URL`` comes
   only once the server answers;
2. ``popagent`` is not on ``PATH`` until ``source .venv/bin/activate``; then
   ``popagent remember`` and ``popagent recall``, verbatim from the README;
3. the same over HTTP: the README's ``PUT /api/facts/by-key/ui.theme``, twice
   (one fact), and its recall;
4. the GUI in Debian's Chromium (``/usr/bin/chromium``, through Playwright): the
   memory browser with the fact, the recall preview finding it, settings,
   sessions, the chat page without a model and the API reference; each page
   is screenshotted (``build/test-artifacts/screenshots/first-minute-*.png``)
   and checked by what it shows and that nothing on it failed or came from
   elsewhere;
5. a second ``scripts/serve`` skips the install (nothing changed) and refuses
   the busy port before printing any URL.

Time: the copy's ``.venv`` is a real one made by ``scripts/venv``, and pip
really installs popagent into it, but the dependencies come from this test
environment through ``PYTHONPATH`` (pip sees them installed), so the install
takes seconds instead of minutes. A clean install of every dependency is
``scripts/wheel-check``'s proof (``.ci/run``). The data goes to a temporary
``XDG_DATA_HOME``, so the default data directory is the copy's own.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from playwright.sync_api import ConsoleMessage, Page, Request, expect, sync_playwright

from tests.gui_support import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS
from tests.web_support import free_port

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The first minute's commands, exactly as the README gives them.
ACTIVATE = "source .venv/bin/activate"
REMEMBER = 'popagent remember "I prefer dark mode" --key ui.theme'
RECALL = 'popagent recall "which theme do I like?"'
PUT_PATH = "/api/facts/by-key/ui.theme"
PUT_BODY = '{"content": "I prefer dark mode", "importance": 0.8}'
RECALL_BODY = '{"query": "which theme do I like?"}'
#: The most the first start may take (venv, install, initdb, workers) on a busy machine.
FIRST_START_S = 480


def copy_tree(target: Path) -> None:
    """The files a clone of the working tree would have, with their modes."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    names = [n for n in listed.split("\0") if n]
    assert "scripts/serve" in names and "README.md" in names
    for name in names:
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def user_env(tmp: Path) -> dict[str, str]:
    """A shell's environment without popagent's settings and without this test's venv
    on PATH; the dependencies on PYTHONPATH (see the module docstring)."""
    here = Path(sysconfig.get_paths()["scripts"]).resolve()
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p).resolve() != here]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("POPAGENT_", "OPENAI_")) and k not in ("VIRTUAL_ENV", "PYTHONHOME")
    }
    env |= {
        "PATH": os.pathsep.join(path),
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
        "XDG_DATA_HOME": str(tmp / "xdg-data"),
        # Short, as a login's /run/user/UID is: the cluster's socket goes there when the
        # data dir's path is too long for a Unix socket (pytest-xdist's paths are).
        "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="pa-run-", dir="/tmp"),
    }
    return env


class Lines:
    """A process's standard output, line by line, as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        self._stream = stream = process.stdout

        def pump() -> None:
            for line in stream:
                self._queue.put(line.rstrip("\n"))
            self._queue.put(None)

        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """After the process ended: the rest of its output read, the pipe closed."""
        self._thread.join(timeout=30)
        self._stream.close()

    def until(self, text: str, timeout_s: float) -> str:
        """The first line holding ``text``; fails on a timeout or the end of the output."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {text!r} in {timeout_s} s:\n" + "\n".join(self.seen)
                ) from None
            if line is None:
                raise AssertionError(f"output ended before {text!r}:\n" + "\n".join(self.seen))
            self.seen.append(line)
            if text in line:
                return line


@contextmanager
def serving(
    clone: Path, env: dict[str, str], port: int, log: Path
) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    with log.open("w") as err:
        process = subprocess.Popen(
            ["scripts/serve", "--port", str(port), "--maintenance-interval", "0"],
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    lines = Lines(process)
    try:
        yield process, lines
    except AssertionError as exc:  # say why the server stopped, from its stderr
        raise AssertionError(f"{exc}\n--- serve's stderr:\n{log.read_text()[-4000:]}") from None
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        lines.close()


def shell(clone: Path, env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def shot(page: Page, name: str) -> None:
    """A screenshot of the whole page, checked to be a real image of some size."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    image = page.screenshot(path=str(SCREENSHOTS / f"first-minute-{name}.png"), full_page=True)
    assert image.startswith(b"\x89PNG") and len(image) > 5_000, name


def walk_the_gui(base: str, fact_id: int) -> None:
    """The README's "Open http://127.0.0.1:8787/": each page a new user would open."""
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.set_default_timeout(20_000)

            def on_console(message: ConsoleMessage) -> None:
                if message.type == "error":
                    problems.append(f"console: {message.text}")

            def on_request(request: Request) -> None:
                if not request.url.startswith((base, "data:")):
                    problems.append(f"request elsewhere: {request.url}")

            page.on("console", on_console)
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("request", on_request)

            page.goto(base + "/")
            expect(page.get_by_role("heading", level=1)).to_have_text("Memories")
            row = page.locator("tr.memory")
            expect(row).to_have_count(1)
            expect(row).to_contain_text("I prefer dark mode")
            expect(row).to_contain_text("ui.theme")
            expect(page.get_by_test_id("resource")).to_have_text("popagent-user")
            shot(page, "memories")

            page.get_by_role("link", name="I prefer dark mode").click()
            expect(page).to_have_url(f"{base}/memories/{fact_id}")
            expect(page.get_by_test_id("version")).to_have_text("2")  # the PUT, twice
            shot(page, "fact")

            page.get_by_role("link", name="Recall", exact=True).click()
            page.get_by_label("Query").fill("which theme do I like?")
            page.get_by_role("button", name="Preview recall").click()
            expect(page.get_by_test_id("rendered")).to_contain_text(
                re.compile(r"\[fact, said [^\]]+\] I prefer dark mode")
            )
            expect(page.locator("table.components").first).to_contain_text("Contribution")
            shot(page, "recall")

            page.get_by_role("link", name="Settings", exact=True).click()
            expect(page.get_by_test_id("server-facts")).to_contain_text("none configured")
            expect(page.locator("legend").first).to_have_text("Looking up earlier messages")
            shot(page, "settings")

            page.get_by_role("link", name="Sessions", exact=True).click()
            expect(page.get_by_test_id("empty")).to_contain_text("start a chat")
            shot(page, "sessions")

            page.get_by_role("link", name="Chat", exact=True).click()
            expect(page.get_by_test_id("no-model")).to_contain_text("POPAGENT_MODEL")
            shot(page, "chat")

            page.get_by_role("link", name="API", exact=True).click()
            expect(page.get_by_role("heading", level=1)).to_have_text("API reference")
            expect(page.locator("#schema-FactCreate")).to_contain_text("content")
            shot(page, "api")

            assert not problems, problems
            # A mistyped address: the HTML 404 page, with the nav to go on from.
            missing = page.goto(base + "/no/such/page")
            assert missing is not None and missing.status == 404
            expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
            expect(page.get_by_role("link", name="Memories", exact=True)).to_be_visible()
        finally:
            browser.close()


def test_the_readme_first_minute_from_a_fresh_clone(tmp_path: Path) -> None:
    for text in ("scripts/serve", ACTIVATE, REMEMBER, RECALL, PUT_PATH, PUT_BODY, RECALL_BODY):
        assert text in README, f"the README no longer says {text!r}"
    clone = tmp_path / "popagent"
    copy_tree(clone)
    assert not (clone / ".venv").exists()
    env = user_env(tmp_path)
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    with serving(clone, env, port, tmp_path / "serve.err") as (server, lines):
        # 1. Each step said, then the URL once the server answers, not before.
        lines.until("scripts/venv: creating the virtual environment .venv", 60)
        lines.until("scripts/serve: installing popagent", 30)
        lines.until("popagent serve: creating the PostgreSQL cluster", FIRST_START_S)
        ready = lines.until("ready at", FIRST_START_S)
        assert ready == f"popagent serve: ready at {base}/ (the web GUI and the API; Ctrl-C stops)"
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        found = shell(clone, env, '.venv/bin/python -c "import popagent; print(popagent.__file__)"')
        assert found.stdout.startswith(str(clone)), found  # the copy's popagent runs

        # 2. popagent is on PATH only after activating the venv.
        assert shell(clone, env, "command -v popagent").returncode != 0
        stored = shell(clone, env, f"{ACTIVATE} && command -v popagent && {REMEMBER}")
        assert stored.returncode == 0, stored.stderr
        assert stored.stdout.splitlines()[0] == str(clone / ".venv" / "bin" / "popagent")
        assert stored.stdout.splitlines()[1].startswith("created fact ")
        recalled = shell(clone, env, f"{ACTIVATE} && {RECALL}")
        assert recalled.returncode == 0, recalled.stderr
        assert re.search(r"^- \[fact, said [^\]]+\] I prefer dark mode", recalled.stdout, re.M)

        # 3. The same over HTTP, the README's requests; the PUT twice leaves one fact.
        headers = {"content-type": "application/json"}
        with httpx.Client(base_url=base, timeout=30, headers=headers) as http:
            first = http.put(PUT_PATH, content=PUT_BODY)
            second = http.put(PUT_PATH, content=PUT_BODY)
            assert (first.status_code, second.status_code) == (200, 200), first.text
            assert first.json()["id"] == second.json()["id"]
            assert first.json()["importance"] == 0.8 and first.json()["version"] == 2
            preview = http.post("/api/recall", content=RECALL_BODY)
            assert preview.status_code == 200
            assert "I prefer dark mode" in preview.json()["rendered"]
            facts = http.get("/api/facts").json()["items"]
            assert [f["content"] for f in facts] == ["I prefer dark mode"]

        # 4. The GUI's pages in Chromium, as the README lists them.
        walk_the_gui(base, facts[0]["id"])

        # 5. A second start: nothing to install, and the port is refused before any URL.
        again = subprocess.run(
            ["scripts/serve", "--port", str(port)],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert again.returncode == 1
        assert "pyproject.toml has not changed: no install" in again.stdout
        assert f"port {port} on 127.0.0.1 is in use" in again.stderr
        assert "ready at" not in again.stdout + again.stderr
        assert server.poll() is None  # the first one is untouched

    assert server.returncode in (0, -signal.SIGTERM)
    assert not (tmp_path / "xdg-data" / "popagent" / "pgdata" / "postmaster.pid").exists()
