"""Framework adapters: popagent's memory inside other agent frameworks.

Each adapter lives in its own module and imports its framework only when that
module is imported (the frameworks are optional extras); every adapter talks to
popagent through :class:`popagent.adapters.backend.MemoryBackend`.
"""

# Nothing at the package level: each adapter is imported by its module's name.
__all__: list[str] = []
