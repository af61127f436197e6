import os
import tempfile
from pathlib import Path

import pytest

# Built datasets go to a per-session cache, never into the repository.
_CACHE = Path(tempfile.mkdtemp(prefix="fourdb-test-cache-"))
os.environ.setdefault("FOURDB_CACHE", str(_CACHE))
os.environ.setdefault("DGLBACKEND", "pytorch")


@pytest.fixture(scope="session")
def synthetic_db():
    from fourdb.datasets import load_dataset

    return load_dataset("synthetic", size=150)
