"""``popagent chat``: a terminal chat with long-term memory, one ``Agent.run_turn`` per message.

One process, one event loop: an ``asyncio.Runner`` keeps the database pool,
the model client and the agent across turns, and input is read between its
``run`` calls, while no loop is running. So Ctrl-D or Ctrl-C at the prompt
simply ends the chat, and Ctrl-C during a turn stops that turn only.

Invariants:
- With no model configured nothing is opened: a message says how to configure
  one (which variables, with examples) and the exit status is 2.
- A failed turn (``TurnFailedError``) is reported and the chat goes on; the
  agent stored no episode for it, and the user's message stays in the session.
- The secret tools are offered only when a secret key can be loaded, the way
  ``popagent secrets`` loads it; otherwise the chat runs without them and says so once.
- History is observational memory (``ObservationalHistory``): the resource's
  ``popagent settings`` drive it, read afresh at the start of every turn, and
  ``read_history`` is offered while its retrieval scope is on.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any

import click

from ..agent import Agent, TurnResult
from ..checks import check_new_session_id
from ..connection import connect
from ..embed import configured_embedder
from ..errors import NotFoundError, PopagentError, TurnFailedError
from ..llm import ModelSettings, OpenAIChatModel
from ..models import Session
from ..observe.state import read_generations
from ..secrets import SecretCipher, SecretKeyError
from ..threads.service import PAGE_CAP
from .common import Settings, exit_codes, memory_line, one_line, secret_cipher, session_line
from .sessions import first_user_messages, history_lines

__all__ = ["NO_MODEL_HELP", "chat_command"]

NO_MODEL_HELP = """\
No model is configured. popagent chat talks to any OpenAI-compatible Chat Completions
endpoint (OpenAI, Ollama, vLLM, llama.cpp server, ...). Configure it with:

  POPAGENT_MODEL_BASE_URL   base URL of the API (default: https://api.openai.com/v1)
  POPAGENT_MODEL            model name (required)
  POPAGENT_MODEL_API_KEY    API key (or OPENAI_API_KEY); local servers need none

For example:

  # OpenAI
  export POPAGENT_MODEL=gpt-4o-mini POPAGENT_MODEL_API_KEY=sk-...
  # Ollama, after `ollama serve` and `ollama pull llama3.1`
  export POPAGENT_MODEL_BASE_URL=http://localhost:11434/v1 POPAGENT_MODEL=llama3.1
  # vLLM, after `vllm serve Qwen/Qwen2.5-7B-Instruct --enable-auto-tool-choice
  #   --tool-call-parser hermes` on HOST
  export POPAGENT_MODEL_BASE_URL=http://HOST:8000/v1 POPAGENT_MODEL=Qwen/Qwen2.5-7B-Instruct
"""

HELP = f"""\
/memories      the memories recalled for the last turn: the block the model saw, and scores
/history [N]   this session's last N messages as stored (default 20, at most {PAGE_CAP})
/observations  this session's active observation log (observational memory), if any
/help          this list
/exit          leave (so do /quit, Ctrl-D and Ctrl-C at the prompt)
Start a message with // to send text that begins with /."""

PICKER_SIZE = 10
HISTORY_DEFAULT = 20


@click.command("chat")
@click.option("--session-id", help="Continue this session (an unknown ID starts it).")
@click.option("--new", "new", is_flag=True, help="Start a new session without asking.")
@click.option("--show-memories", is_flag=True, help="Show the recalled memories after each reply.")
@click.option("--no-stream", is_flag=True, help="Print each reply whole, not as it arrives.")
@click.pass_context
def chat_command(
    ctx: click.Context, session_id: str | None, new: bool, show_memories: bool, no_stream: bool
) -> None:
    """Chat with the configured model, with this resource's long-term memory.

    The model is set by POPAGENT_MODEL_BASE_URL, POPAGENT_MODEL and
    POPAGENT_MODEL_API_KEY. In the chat, /help lists the commands.
    """
    if session_id is not None and new:
        raise click.UsageError("--session-id and --new exclude each other")
    with exit_codes():
        model_settings = ModelSettings.from_env()
    if model_settings is None:
        click.echo(NO_MODEL_HELP, err=True, nl=False)
        ctx.exit(2)
    settings: Settings = ctx.obj
    cipher: SecretCipher | None = None
    no_secrets: str | None = None
    try:
        cipher = secret_cipher()
    except SecretKeyError as exc:
        no_secrets = str(exc)

    with exit_codes(), asyncio.Runner() as runner:
        stack = AsyncExitStack()
        try:
            app = runner.run(
                stack.enter_async_context(
                    connect(
                        settings.database_url,
                        data_dir=settings.data_dir,
                        max_size=4,
                        embedder=configured_embedder(),
                    )
                )
            )
            runner.run(app.memory.warm_up())  # not in the first turn
            app.memory.watch_vectors(settings.resource_id)
            model = runner.run(stack.enter_async_context(OpenAIChatModel(model_settings)))
            secrets = None if cipher is None else app.secrets(cipher)
            # Background buffering runs while turns run (the loop is idle while the
            # chat waits for input); ``stack`` cancels what still runs at exit.
            agent = app.configured_agent(model, stack, secrets=secrets)
            click.echo(
                f"popagent chat: model {model.model} at {model.provider}, "
                f"resource {settings.resource_id}"
            )
            if no_secrets is not None:
                click.echo(f"Secret tools are off: {no_secrets}")
            session = _Chat(runner, agent, settings.resource_id, not no_stream, show_memories)
            try:
                session.choose_session(session_id, new)
            except click.Abort:
                click.echo()
                return
            session.loop()
        finally:
            runner.run(stack.aclose())


class _Chat:
    """The chat's state between turns: the session, the last turn's result."""

    def __init__(
        self,
        runner: asyncio.Runner,
        agent: Agent,
        resource_id: str,
        stream: bool,
        show_memories: bool,
    ) -> None:
        self.runner = runner
        self.agent = agent
        self.threads = agent.threads
        self.resource_id = resource_id
        self.stream = stream
        self.show_memories = show_memories
        self.session_id = ""
        self.last: TurnResult | None = None

    # --- the session ----------------------------------------------------------------------

    def choose_session(self, session_id: str | None, new: bool) -> None:
        """Use ``session_id``, a new session, or the one the user picks from the recent ones."""
        if session_id is None and not new:
            session_id = self._pick()
        if session_id is None:
            self.session_id = uuid.uuid4().hex
            click.echo(f"Session {self.session_id} (new). /help lists the commands.")
            return
        try:
            self.runner.run(self.threads.get_session(self.resource_id, session_id))
        except NotFoundError:
            # The rule every surface applies to a new session's ID (exit 2 here, before
            # the first turn): one that the GUI's and the API's URLs can name.
            session_id = check_new_session_id(session_id)
            click.echo(f"Session {session_id} (new). /help lists the commands.")
        else:
            click.echo(f"Session {session_id} (resumed; /history shows its recent messages).")
        self.session_id = session_id

    def _pick(self) -> str | None:
        """The session the user picks by number, or ``None`` for a new one."""

        async def recent() -> tuple[list[Session], dict[str, str]]:
            rows = await self.threads.list_sessions(self.resource_id, limit=PICKER_SIZE)
            return rows, await first_user_messages(self.threads, self.resource_id, rows)

        rows, previews = self.runner.run(recent())
        if not rows:
            return None
        click.echo("Recent sessions:")
        for number, s in enumerate(rows, 1):
            click.echo(f"{number:>3}) {session_line(s, previews.get(s.session_id))}")
        while True:
            answer = click.prompt(
                "Pick a session by number, or press Enter for a new one",
                default="",
                show_default=False,
            ).strip()
            if not answer:
                return None
            if answer.isdecimal() and 1 <= int(answer) <= len(rows):
                return rows[int(answer) - 1].session_id
            click.echo(f"Not a number from 1 to {len(rows)}: {answer!r}", err=True)

    # --- the conversation -----------------------------------------------------------------

    def loop(self) -> None:
        """Read messages and commands until /exit, EOF or Ctrl-C."""
        while True:
            try:
                line = click.prompt("you", default="", show_default=False, prompt_suffix="> ")
            except click.Abort:  # EOF or Ctrl-C at the prompt
                click.echo()
                break
            text = line.strip()
            if not text:
                continue
            if text.startswith("//"):
                self._turn(text[1:])
            elif text.startswith("/"):
                if not self._command(text):
                    break
            else:
                self._turn(line)
        click.echo("Bye.")

    def _command(self, text: str) -> bool:
        """Run an in-chat command; ``False`` means leave."""
        name, _, argument = text.partition(" ")
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            click.echo(HELP)
        elif name == "/memories":
            self._show_memories()
        elif name == "/history":
            self._show_history(argument.strip())
        elif name == "/observations":
            self._show_observations()
        else:
            click.echo(f"Unknown command {name}; /help lists the commands.", err=True)
        return True

    def _turn(self, text: str) -> None:
        streamed = False

        async def on_text(piece: str) -> None:
            nonlocal streamed
            if not streamed:
                click.echo("assistant> ", nl=False)
                streamed = True
            click.echo(piece, nl=False)

        turn = self.agent.run_turn(
            self.resource_id, self.session_id, text, on_text=on_text if self.stream else None
        )
        try:
            result = self._interruptible(turn)
        except TurnFailedError as exc:
            self._fail(streamed, f"Error: {exc.message}")
            click.echo(
                "The turn failed: no episode was stored; your message stays in the session.",
                err=True,
            )
            return
        except PopagentError as exc:
            self._fail(streamed, f"Error: {exc}")
            return
        except KeyboardInterrupt:
            self._fail(streamed, "Interrupted: the turn was stopped.")
            return
        self.last = result
        if streamed:
            click.echo()
        else:
            click.echo(f"assistant> {result.reply}")
        for call in result.tool_calls:
            # remember's answer says what it stored (or why not), which the user should see.
            shown = call.text if call.name == "remember" and call.text else call.outcome
            click.echo(f"  [{call.name}: {one_line(shown, 200)}]")
        if self.show_memories:
            self._show_memories()

    def _interruptible(self, turn: Coroutine[Any, Any, TurnResult]) -> TurnResult:
        """Run ``turn``; Ctrl-C (SIGINT) cancels it, and ``KeyboardInterrupt`` follows.

        The handler is the event loop's, and only while the turn runs (at the prompt,
        Ctrl-C is Python's ``KeyboardInterrupt`` as before). The loop's handler comes
        with a wakeup descriptor, which wakes the loop whichever thread the kernel gave
        the signal to: the embedding model's threads can take it too, and Python's own
        handler (``asyncio.Runner``'s) then waited for the loop's next wakeup, which a
        turn waiting on its model call may not have for a minute.
        """
        loop = self.runner.get_loop()

        async def cancellable() -> TurnResult:
            task = asyncio.current_task()
            assert task is not None
            try:
                loop.add_signal_handler(signal.SIGINT, task.cancel)
            except (NotImplementedError, RuntimeError, ValueError):  # not here: Python's
                return await turn
            try:
                return await turn
            finally:
                loop.remove_signal_handler(signal.SIGINT)

        try:
            return self.runner.run(cancellable())
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None

    @staticmethod
    def _fail(streamed: bool, message: str) -> None:
        if streamed:
            click.echo()  # end the half-streamed line
        click.echo(message, err=True)

    def _show_memories(self) -> None:
        last = self.last
        if last is None:
            click.echo("No turn has completed yet in this chat.")
        elif not last.recalled:
            click.echo("The last turn recalled no memories.")
        else:
            click.echo(last.memory_block)
            click.echo("Scores:")
            for rank, r in enumerate(last.recalled, 1):
                click.echo(f"#{rank} score={r.score:.3f}  {memory_line(r.memory)}")

    def _show_history(self, argument: str) -> None:
        limit = HISTORY_DEFAULT
        if argument:
            if not argument.isdecimal() or not 1 <= int(argument) <= PAGE_CAP:
                click.echo(f"Usage: /history [N], N from 1 to {PAGE_CAP}", err=True)
                return
            limit = int(argument)
        messages = self.runner.run(
            self.threads.recent_messages(self.resource_id, self.session_id, limit=limit)
        )
        if not messages:
            click.echo("No messages in this session yet.")
        for line in history_lines(messages, last_page=True):
            click.echo(line)

    def _show_observations(self) -> None:
        logs = self.runner.run(read_generations(self.agent.pool, self.resource_id, self.session_id))
        head = logs[-1] if logs else None
        if head is None or not head.observations.strip():
            click.echo("No observations yet in this session.")
            return
        through = head.last_observed_message_id
        click.echo(
            f"Observations (generation {head.generation}, {head.origin}; "
            f"messages through #{through}; {head.observation_tokens:,} tokens):"
        )
        click.echo(head.observations)
