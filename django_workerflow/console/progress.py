"""An instance's progress as the console shows it: a bar with its fraction and message in
the admin (the change list's status column and the change page), one line in the terminal
(``manage.py workerflow show`` and ``list``)."""

from __future__ import annotations

from django.utils.html import format_html

from django_workerflow.values.progress import Number, Progress


def _count(value: Number) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}".rstrip("0").rstrip(".")


def progress_text(progress: Progress | None) -> str:
    """ "42% (4,200 of 10,000): importing rows", "3: started" without a total; "" for none."""
    if progress is None:
        return ""
    if progress.total is None:
        numbers = _count(progress.current)
    else:
        percent = int((progress.fraction or 0) * 100)
        numbers = f"{percent}% ({_count(progress.current)} of {_count(progress.total)})"
    return f"{numbers}: {progress.message}" if progress.message else numbers


def progress_figure(progress: Progress | None, *, limit: int | None = None) -> str:
    """ "42%: importing rows", or the count without a total ("3: started"), the message
    cut at ``limit`` characters; "" for none (the list's column)."""
    if progress is None:
        return ""
    if progress.fraction is None:
        figure = _count(progress.current)
    else:
        figure = f"{int(progress.fraction * 100)}%"
    message = progress.message
    if limit is not None and len(message) > limit:
        message = message[: limit - 1].rstrip() + "…"
    return f"{figure}: {message}" if message else figure


def progress_line(progress: Progress) -> str:
    """:func:`progress_text` with a bar of 20 characters before it when there is a total
    (the caller escapes control characters for a terminal)."""
    text = progress_text(progress)
    if progress.fraction is None:
        return text
    filled = round(progress.fraction * 20)
    return f"[{'#' * filled}{'.' * (20 - filled)}] {text}"


def progress_bar(progress: Progress | None, *, limit: int | None = None) -> str:
    """A bar (when there is a total) and :func:`progress_text` as HTML, cut at ``limit``
    characters (the whole text on hover); "" for none."""
    if progress is None:
        return ""
    text = whole = progress_text(progress)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    if progress.fraction is None:
        return format_html('<span class="wf-progress-text" title="{}">{}</span>', whole, text)
    percent = f"{progress.fraction * 100:.1f}"
    return format_html(
        '<span class="wf-progress" role="progressbar" aria-valuemin="0" aria-valuemax="100" '
        'aria-valuenow="{}" title="{}"><span class="wf-progress-fill" style="width: {}%">'
        '</span></span><span class="wf-progress-text">{}</span>',
        percent,
        whole,
        percent,
        text,
    )
