"""``python -m smr`` runs the command line."""

from smr.cli.root import main

main()
