"""``python -m popagent.cli``: the same as the ``popagent`` command."""

from . import main

main()
