"""``python -m specsim`` runs the specsim command line."""

from specsim.cli import main

main()
