"""``python -m semsearch``: the same entry point as the ``semsearch`` command."""

from semsearch.cli.commands import main_exit

main_exit()
