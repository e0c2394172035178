"""``popagent embed``: write the vectors semantic recall needs, for memories that lack them.

Backfills after semantic recall is turned on, and re-embeds after a model
switch (vectors are per model, so the new model's are simply missing). It is
resumable: each batch commits on its own, and a rerun embeds only what is
still missing. ``--prune`` deletes other models' vectors of the same resources.
The provider comes from ``--embedder`` (or ``POPAGENT_EMBEDDER``; see
``popagent.embed.settings``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import click

from ..connection import connect
from ..defaults import (
    EMBEDDER_ENV,
    EMBEDDING_API_KEY_ENV,
    EMBEDDING_BASE_URL_ENV,
    EMBEDDING_DIMENSIONS_ENV,
    EMBEDDING_MODEL_ENV,
    OPENAI_API_KEY_ENV,
)
from ..embed import PROVIDERS, make_embedder
from .common import Settings, exit_codes, plural

__all__ = ["embed_command"]


@click.command("embed")
@click.option(
    "--embedder",
    type=click.Choice([p for p in PROVIDERS if p != "none"]),
    envvar=EMBEDDER_ENV,
    default="local",
    show_default=True,
    help="Embedding provider.",
)
@click.option("--model", envvar=EMBEDDING_MODEL_ENV, help="Model name (openai provider).")
@click.option("--base-url", envvar=EMBEDDING_BASE_URL_ENV, help="Endpoint (openai provider).")
@click.option(
    "--dimensions", type=int, envvar=EMBEDDING_DIMENSIONS_ENV, help="Dimensions to request."
)
@click.option("--all-resources", is_flag=True, help="Every resource, not just --resource-id.")
@click.option("--batch-size", type=int, default=64, show_default=True, help="Memories per commit.")
@click.option("--max", "max_memories", type=int, help="Stop after this many (resume later).")
@click.option(
    "--prune",
    is_flag=True,
    help="Delete the same resources' vectors of other models (not a framework store's own).",
)
@click.pass_context
def embed_command(
    ctx: click.Context,
    embedder: str,
    model: str | None,
    base_url: str | None,
    dimensions: int | None,
    all_resources: bool,
    batch_size: int,
    max_memories: int | None,
    prune: bool,
) -> None:
    """Embed the memories that have no vector of the chosen model (resumable)."""
    settings: Settings = ctx.obj
    with exit_codes():
        chosen = make_embedder(
            embedder,
            model=model,
            base_url=base_url,
            api_key=os.environ.get(EMBEDDING_API_KEY_ENV) or os.environ.get(OPENAI_API_KEY_ENV),
            dimensions=dimensions,
        )
        assert chosen is not None  # "none" is not offered
        bar: list[Any] = []

        def started(missing: int) -> None:
            click.echo(f"{missing:,} memories to embed with {chosen.model}", err=True)
            progress: Any = click.progressbar(length=missing, label="embedding", file=sys.stderr)
            bar.append(progress)
            bar[0].__enter__()

        async def main() -> None:
            async with connect(
                settings.database_url, data_dir=settings.data_dir, embedder=chosen, max_size=2
            ) as app:
                try:
                    report = await app.memory.embed_missing(
                        None if all_resources else settings.resource_id,
                        batch_size=batch_size,
                        max_memories=max_memories,
                        prune=prune,
                        on_start=started,
                        on_batch=lambda n: bar[0].update(n),
                    )
                finally:
                    if bar:
                        bar[0].__exit__(None, None, None)
            click.echo(
                f"embedded {plural(report.embedded, 'memory', 'memories')} of "
                f"{plural(report.resources, 'resource')} with {report.model}; "
                f"{report.remaining:,} remaining"
                + (f"; pruned {plural(report.pruned, 'vector')} of other models" if prune else "")
            )

        asyncio.run(main())
