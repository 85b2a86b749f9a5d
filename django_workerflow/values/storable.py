"""Can this text be stored? And error text made safe to store, whatever the error.

Both databases store text as UTF-8, so a lone UTF-16 surrogate (``"\\ud800"``, which
``json.loads`` returns for ``"\\ud800"`` escapes) cannot be encoded, and PostgreSQL's text
columns refuse NUL (``"\\x00"``). User values holding either are refused before any write,
on both databases alike; error text is never refused: it is escaped and truncated instead,
because a failure must always be recorded.
"""

from __future__ import annotations

from django_workerflow.exceptions import WorkflowInputError

# The largest value of a PositiveIntegerField on every database (max_attempts, say).
MAX_INTEGER = 2_147_483_647
# The width of the error_name columns.
MAX_ERROR_NAME_LENGTH = 200
# Error messages are cut here: they are shown and stored on every failed attempt.
MAX_ERROR_MESSAGE_LENGTH = 10_000
TRUNCATION_MARKER = "… [truncated]"


def problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None if it can."""
    if "\x00" in text:
        return f"contains a NUL character (\\x00) at position {text.index(chr(0))}"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        return f"contains a lone UTF-16 surrogate (U+{code:04X}) at position {exc.start}"
    return None


def check_text(value: str, *, what: str) -> str:
    """Return ``value`` if it can be stored, else raise WorkflowInputError naming ``what``."""
    reason = problem(value)
    if reason is not None:
        raise WorkflowInputError(
            f"{what} {reason}, which the database cannot store as text. Remove it, or decode "
            "the text it came from with errors='replace'."
        )
    return value


def check_reason(reason: object, *, verb: str) -> str | None:
    """An operator's reason for ``verb`` (cancel, retry, fork), as stored: None for none or
    "", the text if it is a storable string, else WorkflowInputError."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise WorkflowInputError(f"A {verb} reason must be a string, not {type(reason).__name__}.")
    check_text(reason, what=f"The {verb} reason")
    return reason or None


def safe_text(text: str, *, max_length: int) -> str:
    """``text`` with lone surrogates and NUL escaped, cut to ``max_length`` with a marker."""
    if problem(text) is not None:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    if len(text) > max_length:
        text = text[: max_length - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER
    return text


def error_name(exc: BaseException) -> str:
    """The class name of ``exc`` as it is stored in an ``error_name`` column."""
    return safe_text(type(exc).__name__, max_length=MAX_ERROR_NAME_LENGTH)


def error_message(exc: BaseException) -> str:
    """``"<ClassName>: <message>"`` (the class name alone for an empty message), storable.

    Never raises: an exception whose ``str()`` fails is described by its class name and the
    class of the error that reading its message raised.
    """
    name = error_name(exc)
    text, readable = _read(exc)
    if not readable:
        return safe_text(f"{name} {text}", max_length=MAX_ERROR_MESSAGE_LENGTH)
    message = f"{name}: {text}" if text else name
    return safe_text(message, max_length=MAX_ERROR_MESSAGE_LENGTH)


def describe(exc: BaseException) -> str:
    """``str(exc)``, or why it could not be read; never raises."""
    return _read(exc)[0]


def _read(exc: BaseException) -> tuple[str, bool]:
    try:
        return str(exc), True
    except Exception as unreadable:  # user __str__ code may raise anything
        return f"(its message could not be read: {type(unreadable).__name__})", False
