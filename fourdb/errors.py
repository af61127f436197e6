"""User-facing errors: the CLI prints their message on one line and exits non-zero, no traceback."""
import difflib


class FourdbError(Exception):
    """Bad input from the user (a schema, a data file, a task spec, a config)."""


class SettingError(FourdbError, ValueError):
    """A config setting that nothing reads (a typo), or a value it cannot take."""


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def refuse_unknown(where: str, given, known, noun: str = "setting") -> None:
    """A one-line ``SettingError`` for the first key of ``given`` that is not one of ``known``: a typo must
    not run silently with the default (``where``: what the keys belong to, e.g. "trainer", "model 'gbdt'")."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise SettingError(f"{where} has no {noun} '{unknown[0]}'{did_you_mean(unknown[0], known)}; "
                           f"it takes {', '.join(sorted(known)) or 'none'}")


class SchemaError(FourdbError):
    """The database folder or its schema.yaml is not valid."""


class TaskError(FourdbError):
    """A task spec cannot be materialized against its database."""


class DatabaseImportError(FourdbError):
    """A database file or folder cannot be imported (unknown format, no tables, broken declared keys)."""


class UntrustedInputError(FourdbError):
    """Input asked for what input may not do: SQL that is not one query or that reaches for files or settings,
    a path out of its folder, a pickled object (README, "What fourdb trusts")."""
