"""``python -m aflite_fast.cli`` runs the command line."""
import sys

from aflite_fast.cli import main

sys.exit(main())
