"""``ast.parse`` for tests that read source files, safe on CPython 3.11.7.

CPython 3.11.7 keeps the AST constructor's recursion depth in state shared by the whole interpreter: a second
conversion that runs inside the first (a garbage collection during it runs a finalizer that parses: 3.11's
traceback module parses for its carets, e.g. when asyncio logs "Future exception was never retrieved"; or
another thread parses while the collector has released the GIL) makes the first raise "SystemError: AST
constructor recursion depth mismatch". CI hit it in a worker that had run other tests (python/cpython#106905,
the 3.11 fix PR #113476 merged after 3.11.7's release). With the collector off for the parse, no finalizer
runs inside it.
"""

from __future__ import annotations

import ast
import gc
from typing import Any


def parse(source: str, filename: str = "<unknown>", **options: Any) -> ast.Module:
    enabled = gc.isenabled()
    gc.disable()  # no collection, so no finalizer, inside the conversion
    try:
        return ast.parse(source, filename, **options)
    finally:
        if enabled:
            gc.enable()
