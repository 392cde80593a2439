"""`python -m orchestrator.cli`: the gameday command."""
from orchestrator.cli import main

main()
