"""``export_resource``: one resource as JSON Lines (docs/export-format.md).

Invariants:
- The export reads one consistent snapshot (a read-only repeatable-read
  transaction): a resource written to meanwhile is exported as it was when
  the export began.
- Secrets are written only with ``include_secrets``, and then as the
  ciphertext, nonce and key fingerprint stored: nothing here decrypts.
- popagent's own embeddings and recall bookkeeping (access counts,
  statistics) are not exported: an import queues its memories for new vectors
  (the vector worker writes them; ``popagent embed`` at once). The vectors
  callers made with their own models (LangGraph's ``index=``) are exported
  (``caller_vector`` records): popagent could never remake them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TextIO

from ..checks import check_id
from ..observe.settings_store import settings_from_row
from ..store import portable as sql
from ..store import settings as settings_sql
from ..store.database import Pool
from .records import RECORD_TYPES, header, now, to_line

__all__ = ["export_resource", "popagent_version"]


def popagent_version() -> str:
    try:
        return version("popagent")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


async def export_resource(
    pool: Pool, resource_id: str, out: TextIO, *, include_secrets: bool = False
) -> dict[str, int]:
    """Write ``resource_id``'s header and records to ``out``; return the count per type.

    A resource with nothing stored exports as its header alone.
    """
    resource_id = check_id("resource_id", resource_id)
    counts = dict.fromkeys(RECORD_TYPES, 0)
    if not include_secrets:
        del counts["secret"]
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        out.write(header(resource_id, now(), popagent_version()) + "\n")
        row = await settings_sql.select_settings(conn, resource_id)
        if row is not None:
            stored = settings_from_row(resource_id, row)
            out.write(to_line("settings", {"settings": stored.settings.to_json()}) + "\n")
            counts["settings"] = 1
        for record_type in RECORD_TYPES[1:]:
            if record_type == "secret" and not include_secrets:
                continue
            async for item in sql.rows(conn, record_type, resource_id):
                out.write(to_line(record_type, item) + "\n")
                counts[record_type] += 1
    return counts
