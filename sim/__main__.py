"""``python -m sim`` runs the specsim command line."""

from sim.cli import main

main()
