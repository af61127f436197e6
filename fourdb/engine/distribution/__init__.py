"""Distribution: data-parallel training under torchrun (``ddp``: ranks, shards, seeds) and the gradient
sync of learned row vectors across ranks (``embedding_sync``)."""
