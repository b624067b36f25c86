"""``python -m aflite_fast`` runs the command line."""
import sys

from aflite_fast.cli import main

sys.exit(main())
