"""The run layer: one experiment from a composed config to its run record.

``settings`` checks the config before any data is read; ``inputs`` builds what the model reads, one module
per input kind; ``prepare`` makes the run's task, database, seeds, model and trainer settings one way for
every caller; ``run`` trains and records; ``launch`` starts the ranks of a multi-process run; ``plan``
prices the engine's strategies; ``certify`` proves a trained run's predictions blind to the future;
``record`` is the typed run record the leaderboard checks.
"""
