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


def config(*overrides):
    """The composed `fourdb run` config with these overrides, as the CLI would build it."""
    from hydra import compose, initialize_config_dir

    from fourdb.defaults import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose("config", overrides=list(overrides))
