"""User-facing errors: the CLI prints their message on one line and exits non-zero, no traceback."""


class FourdbError(Exception):
    """Bad input from the user (a schema, a data file, a task spec, a config)."""


class SchemaError(FourdbError):
    """The database folder or its schema.yaml is not valid."""


class TaskError(FourdbError):
    """A task spec cannot be materialized against its database."""


class DatabaseImportError(FourdbError):
    """A database file or folder cannot be imported (unknown format, no tables, broken declared keys)."""


class UntrustedInputError(FourdbError):
    """Input asked for what input may not do: SQL that is not one query or that reaches for files or settings,
    a path out of its folder, a pickled object (README, "What fourdb trusts")."""
