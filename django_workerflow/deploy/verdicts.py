"""Replay verdicts: can the code now deployed replay an instance's history, and if not, why.

The judgement is ``check-replay``'s, not a second one: an instance is checked by
:func:`~django_workerflow.deploy.replay_check.check_instance` and its verdict is not ok
exactly when ``check-replay`` (without ``--allow-new-steps``) prints a ``BREAK`` line for it;
the reason is those lines' messages, joined by a space.

:func:`replay_verdict` judges one instance fresh. For the admin's filter and ``list
--stranded`` the verdicts are stored (:class:`~django_workerflow.models.ReplayVerdictRecord`)
by a background pass, :func:`refresh`, with the :func:`code_fingerprint` of the definitions
the checking process has registered. A stored verdict counts only while that fingerprint is
the reading process's own: after a deploy every stored verdict is "not checked yet" until a
worker running the new code has checked the instance again. The pass runs when a worker
spawns and finds unchecked instances (:func:`queue_on_spawn`), and once a minute from its
django-q2 schedule (:func:`ensure_schedule`), so instances started since are checked too.
A tick never reads or writes a verdict.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import types
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import DatabaseError, models, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from django_workerflow import registry
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.deploy.replay import ReplayReport
from django_workerflow.deploy.replay_check import (
    CHECKED_FIELDS,
    CHECKED_STATUSES,
    CheckFilter,
    check_batch,
    check_instances,
)
from django_workerflow.models import (
    TERMINAL_STATUSES,
    ReplayVerdictRecord,
    WorkflowInstance,
)
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.replay_verdict import ReplayVerdict
from django_workerflow.workers.minute_schedules import ensure_every_minute

logger = logging.getLogger(__name__)

#: Instances checked per batch of the background pass (one read of their steps each).
BATCH_SIZE = 200
#: Batches one run of the background task checks before it queues the next run.
BATCHES_PER_TASK = 25
#: The django-q2 task that runs the background pass.
REFRESH_TASK = "django_workerflow.tasks.refresh_replay_verdicts"
#: The name of its repeating django-q2 schedule.
SCHEDULE_NAME = "workerflow replay verdicts"


class VerdictState(models.TextChoices):
    """What the stored verdict of an unfinished instance says to the reading process."""

    REPLAYS = "yes", "replays on current code"
    STRANDED = "no", "cannot replay on current code (stranded)"
    UNCHECKED = "unchecked", "not checked yet"


def verdict_of(report: ReplayReport) -> ReplayVerdict:
    """The verdict ``check-replay`` gives the report: not ok when a problem breaks the
    history (a new step in place of a recorded one included), with the breaking messages."""
    breaking = report.breaking(allow_new_steps=False)
    if not breaking:
        return ReplayVerdict(ok=True)
    return ReplayVerdict(ok=False, reason=" ".join(problem.message for problem in breaking))


def replay_verdict(instance: WorkflowInstance | str) -> ReplayVerdict:
    """Judge, now, whether the code this process has registered can replay ``instance`` (an
    instance or its key), as ``check-replay`` does; nothing is written.

    A pending, running or paused instance is replayed. A failed one is replayed as
    ``check-replay --include-failed`` does (a retry replays it; its recorded failure is no
    drift). A completed or cancelled one has nothing left to replay: ok, empty reason.
    Raises ``WorkflowInstance.DoesNotExist`` for an unknown key."""
    key = instance.key if isinstance(instance, WorkflowInstance) else instance
    for _, report in check_instances(CheckFilter(key=key, include_failed=True)):
        return verdict_of(report)
    # Nothing to replay: a finished instance, or none of that key.
    if not WorkflowInstance.objects.filter(key=key).exists():
        raise WorkflowInstance.DoesNotExist(f"No workflow instance has the key {key!r}.")
    return ReplayVerdict(ok=True)


# The fingerprint of the deployed code ------------------------------------------------------


def code_fingerprint() -> str:
    """A digest of the registered definitions' code: their names and versions, the code of
    every function of each class (and its bases up to :class:`WorkflowDefinition`), and the
    source file of each class's module. A deploy that changes any of them changes it; a
    change only in a helper module that a definition imports does not (run ``check-replay``,
    or :func:`refresh` with ``recheck=True``, after such a deploy)."""
    digest = hashlib.sha256()
    for definition in sorted(registry.definitions(), key=lambda d: (d.name, d.version)):
        digest.update(f"{definition.name}\0{definition.version}\0".encode())
        digest.update(_class_digest(definition))
    return digest.hexdigest()


_CLASS_DIGESTS: dict[type, bytes] = {}
_FILE_DIGESTS: dict[str, bytes] = {}


def _class_digest(definition: type[WorkflowDefinition]) -> bytes:
    known = _CLASS_DIGESTS.get(definition)
    if known is None:
        digest = hashlib.sha256()
        for cls in definition.__mro__:
            if cls is WorkflowDefinition or not issubclass(cls, WorkflowDefinition):
                break
            digest.update(cls.__qualname__.encode())
            for name, value in sorted(vars(cls).items()):
                code = _code_of(value)
                if code is not None:
                    digest.update(name.encode())
                    _update_with_code(digest, code)
            digest.update(_file_digest(cls))
        known = _CLASS_DIGESTS[definition] = digest.digest()
    return known


def _code_of(value: Any) -> types.CodeType | None:
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    return value.__code__ if isinstance(value, types.FunctionType) else None


def _update_with_code(digest: Any, code: types.CodeType) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _update_with_code(digest, const)
        else:
            digest.update(repr(const).encode())


def _file_digest(cls: type) -> bytes:
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:  # a class with no source file (built in a shell)
        return b""
    if path is None:
        return b""
    known = _FILE_DIGESTS.get(path)
    if known is None:
        try:
            known = hashlib.sha256(Path(path).read_bytes()).digest()
        except OSError:
            known = b""
        _FILE_DIGESTS[path] = known
    return known


# Stored verdicts ----------------------------------------------------------------------------


def unfinished(queryset: QuerySet[WorkflowInstance]) -> QuerySet[WorkflowInstance]:
    """The instances a verdict is about: those whose next tick replays their history."""
    return queryset.filter(status__in=CHECKED_STATUSES)


def with_state(
    queryset: QuerySet[WorkflowInstance], state: VerdictState, code: str | None = None
) -> QuerySet[WorkflowInstance]:
    """The unfinished instances of ``queryset`` whose stored verdict, for the code
    fingerprinted ``code`` (default: this process's), is ``state``."""
    code = code or code_fingerprint()
    if state == VerdictState.UNCHECKED:
        current = ReplayVerdictRecord.objects.filter(instance=OuterRef("pk"), code=code)
        return unfinished(queryset).filter(~Exists(current))
    ok = state == VerdictState.REPLAYS
    return unfinished(queryset).filter(
        replay_verdict_record__code=code, replay_verdict_record__ok=ok
    )


def stored_verdict(instance: WorkflowInstance, code: str | None = None) -> ReplayVerdict | None:
    """The instance's stored verdict if it is current (checked with the code fingerprinted
    ``code``, default this process's) and the instance is unfinished; else None."""
    if instance.status not in CHECKED_STATUSES:
        return None
    found = (
        ReplayVerdictRecord.objects.filter(instance_id=instance.pk, code=code or code_fingerprint())
        .values_list("ok", "reason")
        .first()
    )
    return None if found is None else ReplayVerdict(ok=found[0], reason=found[1])


@dataclass(frozen=True, slots=True)
class Pass:
    """What one run of the background pass did: instances checked (of them stranded),
    stored rows removed (their instance finished or is gone), and whether unchecked
    instances remain after ``last_pk``."""

    checked: int = 0
    stranded: int = 0
    removed: int = 0
    more: bool = False
    last_pk: int = 0


def refresh(
    *,
    after_pk: int = 0,
    batches: int | None = None,
    batch_size: int | None = None,
    recheck: bool = False,
    tidy: bool = True,
) -> Pass:
    """Check the unfinished instances that have no current verdict (``recheck``: all of
    them), in batches by primary key from ``after_pk``, and store each verdict with this
    process's code fingerprint; at most ``batches`` batches (None: until done). Each batch
    is replayed in a rolled-back read-only transaction, then its verdicts are written in one
    short transaction of their own. Concurrent passes only write the same verdicts twice.
    When the pass reaches the end (and ``tidy``), the stored verdicts of finished or deleted
    instances are removed."""
    code = code_fingerprint()
    batch_size = batch_size or BATCH_SIZE
    todo = unfinished(WorkflowInstance.objects.all())
    if not recheck:
        todo = todo.filter(
            ~Exists(ReplayVerdictRecord.objects.filter(instance=OuterRef("pk"), code=code))
        )
    todo = todo.only(*CHECKED_FIELDS).order_by("pk")
    checked = stranded = 0
    last_pk = after_pk
    done = 0
    while batches is None or done < batches:
        batch = list(todo.filter(pk__gt=last_pk)[:batch_size])
        if not batch:
            removed = remove_finished() if tidy else 0
            return Pass(checked, stranded, removed, more=False, last_pk=last_pk)
        last_pk = batch[-1].pk
        verdicts = [(instance, verdict_of(report)) for instance, report in check_batch(batch)]
        _store(verdicts, code)
        checked += len(verdicts)
        stranded += sum(1 for _, verdict in verdicts if not verdict.ok)
        done += 1
        if len(batch) < batch_size:
            removed = remove_finished() if tidy else 0
            return Pass(checked, stranded, removed, more=False, last_pk=last_pk)
    return Pass(checked, stranded, more=True, last_pk=last_pk)


def _store(verdicts: Iterable[tuple[WorkflowInstance, ReplayVerdict]], code: str) -> None:
    now = clock_now()
    rows = [
        ReplayVerdictRecord(
            instance_id=instance.pk, code=code, ok=verdict.ok, reason=verdict.reason, checked_at=now
        )
        for instance, verdict in verdicts
    ]
    with transaction.atomic():
        ReplayVerdictRecord.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["instance"],
            update_fields=["code", "ok", "reason", "checked_at"],
        )


def remove_finished() -> int:
    """Delete the stored verdicts of finished and deleted instances; how many went."""
    finished = WorkflowInstance.objects.filter(pk=OuterRef("instance_id")).filter(
        Q(status__in=TERMINAL_STATUSES)
    )
    alive = WorkflowInstance.objects.filter(pk=OuterRef("instance_id"))
    gone = ReplayVerdictRecord.objects.filter(Exists(finished) | ~Exists(alive))
    deleted, _ = gone.delete()
    return deleted


def stranded_instances(*, fresh: bool = False) -> Iterable[tuple[WorkflowInstance, ReplayVerdict]]:
    """The unfinished instances the code now registered cannot replay, oldest first, each
    with its verdict. From the stored verdicts when every unfinished instance has a current
    one; otherwise (or with ``fresh``) every unfinished instance is checked now, in
    batches, with nothing written."""
    code = code_fingerprint()
    if (
        not fresh
        and not with_state(WorkflowInstance.objects.all(), VerdictState.UNCHECKED, code).exists()
    ):
        rows = (
            with_state(WorkflowInstance.objects.all(), VerdictState.STRANDED, code)
            .select_related("replay_verdict_record")
            .order_by("pk")
        )
        for instance in rows.iterator(chunk_size=BATCH_SIZE):
            record = instance.replay_verdict_record
            yield instance, ReplayVerdict(ok=False, reason=record.reason)
        return
    for instance, report in check_instances(CheckFilter()):
        verdict = verdict_of(report)
        if not verdict.ok:
            yield instance, verdict


# The background task's triggers ------------------------------------------------------------


def queue_refresh(after_pk: int = 0) -> None:
    """Queue a run of the background pass (after ``after_pk``) for the workers, now."""
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.tasks import async_task

    async_task(REFRESH_TASK, after_pk, task_name="workerflow replay verdicts", save=False)


#: How often a scheduled run starts again from the first instance (an instance retried or
#: resumed since is unfinished again below the cursor); in between it goes on from the last
#: instance this process checked for its code.
RESCAN = timedelta(minutes=10)
#: This process's cursor per code fingerprint: (last instance pk checked, when started at 0).
_CURSORS: dict[str, tuple[int, datetime]] = {}


def run_task(after_pk: int | None = None) -> int:
    """The background task: check up to :data:`BATCHES_PER_TASK` batches, queue the next run
    if unchecked instances remain; return how many instances were checked.

    ``after_pk`` is the previous run's cursor when a run queues the next; the schedule's
    runs pass none and go on after the last instance this process checked (instances
    started since), or from the first one every :data:`RESCAN`."""
    code, now = code_fingerprint(), clock_now()
    cursor, since = _CURSORS.get(code, (0, now))
    if after_pk is None:
        if now - since >= RESCAN:
            cursor, since = 0, now
        after_pk = cursor
    removed = remove_finished() if after_pk == 0 else 0
    done = refresh(after_pk=after_pk, batches=BATCHES_PER_TASK, tidy=False)
    done = replace(done, removed=removed)
    _CURSORS[code] = (done.last_pk, since)
    if done.checked or done.removed:
        logger.info(
            "replay verdicts checked=%s stranded=%s removed=%s more=%s",
            done.checked,
            done.stranded,
            done.removed,
            done.more,
        )
    if done.more:
        queue_refresh(done.last_pk)
    return done.checked


def queue_on_spawn(**_: Any) -> bool:
    """django-q2's ``post_spawn``: a worker that finds unfinished instances with no verdict
    for the code it runs (a deploy changed it) queues the background pass at once, rather
    than at the schedule's next minute. True if it queued one."""
    try:
        pending = with_state(WorkflowInstance.objects.all(), VerdictState.UNCHECKED).exists()
        if pending:
            queue_refresh()
    except DatabaseError:  # the schedule's next run comes
        logger.warning("replay verdict pass not queued", exc_info=True)
        return False
    return pending


def ensure_schedule(using: str = "default", **_: Any) -> None:
    """post_migrate: create (once) the schedule that runs the background pass every minute."""
    ensure_every_minute(SCHEDULE_NAME, REFRESH_TASK, using=using)
