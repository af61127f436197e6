"""Feeding: how sampled batches reach the model: stored once and replayed (``store``), prepared ahead in
threads (``pipeline``), or skipped at inference by running one layer at a time (``layerwise``)."""
