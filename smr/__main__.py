"""``python -m smr`` runs the command line."""

from smr.cli_main import main

main()
