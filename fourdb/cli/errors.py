"""How a command ends on an error: one printable line (fourdb's own error as worded, any other as its kind and
first line), never a traceback unless ``FOURDB_DEBUG=1`` asks for one."""
from __future__ import annotations

import os
import sys

from fourdb.errors import FourdbError
from fourdb.untrusted import first_line, safe_text

DEBUG_ENV = "FOURDB_DEBUG"


def error_line(e: BaseException) -> str:
    """One printable line for an error that ends a command: fourdb's own as it is worded, any other as its
    kind and first line (input is data, and no input ends in a traceback; ``FOURDB_DEBUG=1`` shows it)."""
    if isinstance(e, FourdbError):
        return f"error: {safe_text(e, 2000)}"
    return f"error: {safe_text(first_line(e), 2000)} ({DEBUG_ENV}=1 shows the traceback)"


def fail(e: BaseException) -> int:
    if os.environ.get(DEBUG_ENV) and not isinstance(e, FourdbError):
        raise e
    print(error_line(e), file=sys.stderr, flush=True)
    return 2
