"""``python -m smr`` runs the command line."""

from smr.cli import main

main()
