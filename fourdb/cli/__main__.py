"""``python -m fourdb.cli``: how the launcher starts each rank of a multi-process run."""
import sys

from fourdb.cli import main

sys.exit(main())
