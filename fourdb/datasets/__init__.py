"""Built-in databases: nycflights13, lahman and a synthetic shop, one module each (see ``base``)."""
from fourdb.datasets.base import (BUILD_VERSION, DATASETS, DatasetEntry, dataset_error, dataset_folder, load_dataset,
                                  register_dataset)

__all__ = ["BUILD_VERSION", "DATASETS", "DatasetEntry", "dataset_error", "dataset_folder", "load_dataset",
           "register_dataset"]
