"""The README's Python examples run as they are written: copied out of the README into
a file and run as a script, as a reader would, against the suite's database (and,
for the agent turn, the scripted model server over real HTTP)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import popagent
from tests.scripted_model import Reply, ScriptedModelServer

README = Path(__file__).resolve().parent.parent / "README.md"


def example(section: str) -> str:
    """The first ```python block of the README's ``## section``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    found = re.search(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.S)
    assert found, section
    return found.group(1)


def run_script(code: str, tmp_path: Path, env: dict[str, str]) -> str:
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_")}
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_the_library_example_uses_a_demo_resource(
    database_url: str, memory: popagent.LongTermMemory, tmp_path: Path
) -> None:
    code = example("Library")
    assert 'RESOURCE = "readme-demo"' in code and '"popagent-user"' not in code
    before = await memory.list("popagent-user")
    out = run_script(code, tmp_path, {"POPAGENT_DATABASE_URL": database_url})
    assert popagent.HEADER in out and "Kyoto" in out
    stored = await memory.list("readme-demo")
    assert sorted(m.kind for m in stored) == ["episode", "fact"]
    assert "Prefers dark mode" in [m.content for m in stored]
    assert await memory.list("popagent-user") == before  # the reader's own memories untouched


def test_the_agent_turn_example_runs_as_a_script(database_url: str, tmp_path: Path) -> None:
    code = example("Agent turns")
    assert "asyncio.run(main())" in code
    with ScriptedModelServer() as model:
        model.script(Reply("Noted: you prefer dark mode."))
        out = run_script(
            code,
            tmp_path,
            {
                "POPAGENT_DATABASE_URL": database_url,
                "POPAGENT_MODEL_BASE_URL": model.base_url,
                "POPAGENT_MODEL": "scripted-1",
            },
        )
        assert len(model.requests) == 1
    assert out.startswith("Noted: you prefer dark mode.") and " ms" in out
