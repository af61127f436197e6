"""Table features for tabular models: ``single_table`` (the seed row's own columns) and ``dfs`` (deep
feature synthesis, a package of its own), found by the registry in ``base``. The column encoders every
feature set and the graph share (scales, vocabularies, ``EncodedTable``) are in ``fourdb.columns``, below
both."""
from fourdb.features.base import FEATURES, TableData, build_table_features

__all__ = ["FEATURES", "TableData", "build_table_features"]
