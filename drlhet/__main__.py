"""``python -m drlhet``: the command line (see `drlhet.cli`)."""

from drlhet.cli import main

main()
