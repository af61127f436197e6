"""The shared engine between a graph and a GNN, one sub-package per concern:

- ``sampling``: the temporal sampler and its strategies, blocks, graph inputs (``data``), ``GraphSource``
  (what the trainer pulls from) and the recommendation sources (``links``);
- ``feeding``: the offline store of sampled batches, the prefetching pipeline, layer-wise inference;
- ``planning``: the dry run (``auto``), the cost model, the Pareto frontier, ``trainer.nproc=auto``, timing;
- ``distribution``: data-parallel ranks (``ddp``) and the sync of learned row vectors (``embedding_sync``).

``config.EngineConfig`` is the ``engine`` conf group as a whole (mode, feeding, planning and device settings
alike), read by all four, so it sits here rather than in one of them.
"""
