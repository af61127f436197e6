"""Exports to other benchmarks' formats: a database and its tasks as a RelBench 3 dataset folder
(``dataset``), and a run's test predictions as a RelBench prediction table (``predictions``), keyed
alike (``keys``)."""
from fourdb.export.dataset import export_dataset
from fourdb.export.predictions import FORMATS, export_predictions

__all__ = ["FORMATS", "export_dataset", "export_predictions"]
