"""fourdb: predictive machine learning on relational databases."""
import os

os.environ.setdefault("DGLBACKEND", "pytorch")

__version__ = "0.1.0"
