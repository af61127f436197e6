"""Planning: the dry run that measures a run (``auto``), the cost model that prices every strategy from it
(``cost``), the Pareto frontier and the pick (``frontier``), the rank count for ``trainer.nproc=auto``
(``parallel``), and the timers and memory probes they read (``timing``)."""
