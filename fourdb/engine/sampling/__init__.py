"""Sampling: time-correct neighbourhoods of seeds (``sampler``, its ``STRATEGIES``), the blocks they make
(``blocks``), the inputs gathered for them (``data``), and the sources the trainer pulls batches from
(``source.GraphSource``; ``links`` for recommendation: two-tower, identity-aware and context sources)."""
