"""``python -m sparseloom`` runs the command line."""

import sys

from sparseloom.cli import main

sys.exit(main())
