"""`make demo`: the example shop with a worker, the web server and a few orders in flight.

Starts from a fresh SQLite demo database (``DEMO_KEEP_DB=1`` keeps the last run's), migrates
it, creates an admin login with a fresh random password,
starts one `qcluster` and `runserver`, places a few example orders (each starts an order
workflow), starts the tour's instances (one that fails, so Retry and Fork can be tried; two
behind a concurrency limit, one of them queued and the other showing its progress; two held
by their paused definition, to Resume; one started three times and run once, debounced; a
carrier label whose first fetch hangs until its step timeout interrupts it, then a retry
gets it; a newsletter recorded by older code, stranded; a card payment whose card number is
masked for the ``support`` login; a schedule fires every minute) and prints where to look,
then prints the admin address, the login and what it seeded again once the worker's start-up
output is over. It serves on
``DEMO_PORT`` (default 8000), or on a free port it names when that one is busy. Ctrl-C stops
everything.

The seeding (`place_example_orders`, `start_tour`) and the text (`banner`, `reminder`) are
functions of their own, which tests/project/test_demo_tour.py runs without starting a server.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def main() -> int:
    # Ctrl-C (or a SIGTERM) stops the demo even when started from a shell that ignores
    # SIGINT for background jobs.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ.setdefault("WORKERFLOW_DB", "sqlite")
    os.environ["WORKERFLOW_DEMO"] = "1"  # the tour's app, for this process and its children
    os.chdir(ROOT)

    import django

    django.setup()
    if not os.environ.get("DEMO_KEEP_DB"):
        print(start_afresh(), flush=True)
    manage("migrate", "--verbosity", "0")
    password = reset_admin_password()
    reset_support_login(password)
    preferred = int(os.environ.get("DEMO_PORT", "8000"))
    port = free_port(preferred)
    if port != preferred:
        print(port_taken(preferred, port), flush=True)

    # Own sessions: Ctrl-C reaches only this script, which stops the children in order
    # (qcluster must get SIGTERM on its main process, not on its whole group).
    worker = spawn("qcluster")
    web = spawn("runserver", "--noreload", f"127.0.0.1:{port}")
    try:
        wait_for_port(port)
        orders = place_example_orders()
        tour = start_tour()
        print(banner(port, password, orders, tour), flush=True)
        wait_for_failure(tour.failed, worker_running=lambda: worker.poll() is None)
        print(reminder(port, password, tour), flush=True)
        while worker.poll() is None and web.poll() is None:
            time.sleep(0.5)
        print("A child process exited; stopping the demo.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nStopping the worker and the web server...")
        return 0
    finally:
        # A second signal must not cut the stop short and leave the worker running alone:
        # `timeout make demo` and make itself each send one.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop(web)
        stop(worker)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def manage(*args: str) -> None:
    subprocess.run([PYTHON, "manage.py", *args], check=True, cwd=ROOT)


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "manage.py", *args], cwd=ROOT, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def reset_admin_password() -> str:
    from django.contrib.auth import get_user_model

    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(
        username="admin", defaults={"email": "admin@example.com"}
    )
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return password


def reset_support_login(password: str) -> None:
    """The ``support`` login (the admin's password): staff who may view instances but not
    their sensitive values, so the card payment's number reads ••••."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user, _ = get_user_model().objects.get_or_create(
        username="support", defaults={"email": "support@example.com"}
    )
    user.is_staff, user.is_superuser = True, False
    user.set_password(password)
    user.save()
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="workerflow",
            codename__in=["view_workflowinstance", "view_workflowschedule"],
        )
    )


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise RuntimeError("No free TCP port on 127.0.0.1.")


def port_taken(preferred: int, port: int) -> str:
    """What the demo prints when ``preferred`` was busy and it serves on ``port`` instead."""
    return (
        f"Port {preferred} is busy: the demo serves on port {port} instead "
        f"(choose another with `make demo DEMO_PORT=8080`)."
    )


def start_afresh() -> str:
    """Delete the demo's SQLite database, so that this run's tour is not queued behind the
    last run's instances; say so, and how to keep it. A PostgreSQL database is kept."""
    from django.db import connection

    if connection.vendor != "sqlite":
        return f"Using the database {connection.settings_dict['NAME']!r} as it is."
    return delete_sqlite_database(Path(connection.settings_dict["NAME"]))


def delete_sqlite_database(database: Path) -> str:
    """Delete ``database`` and its WAL files; say so, and how to keep it next time."""
    for path in (database, *(database.with_name(database.name + end) for end in ("-wal", "-shm"))):
        path.unlink(missing_ok=True)
    return (
        f"Starting from a fresh demo database ({database.name}); "
        "`make demo DEMO_KEEP_DB=1` keeps the last run's."
    )


def wait_for_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"runserver did not listen on port {port} within {timeout} s.")


def place_example_orders() -> list[str]:
    """Three orders: one paid at once, one awaiting payment, one that gets cancelled; and an
    order in three parcels."""
    from django.db import transaction

    import django_workerflow as workerflow
    from testproject.shop.models import Order, Payment
    from testproject.shop.workflows import OrderFulfillment

    numbers = []
    for label, region in (("paid", "eu"), ("unpaid", "us"), ("cancelled", "eu")):
        with transaction.atomic():
            order = Order.objects.create(
                number=f"{label[:3].upper()}-{secrets.token_hex(2).upper()}",
                customer_email=f"{label}@example.com",
                amount_cents=4200,
            )
            workerflow.start(
                OrderFulfillment,
                key=order.workflow_key,
                input={"order_id": order.pk},
                attributes={"customer": order.customer_email, "region": region},
            )
        numbers.append(order.number)
        if label == "paid":
            Payment.objects.create(order=order, amount_cents=4200, reference="PAY-DEMO")
        if label == "cancelled":
            time.sleep(1)
            workerflow.cancel(order.workflow_key, reason="customer changed their mind")
    numbers.append(place_multi_parcel_order())
    return numbers


def place_multi_parcel_order() -> str:
    """An order in three parcels: a parent workflow with one child shipment per parcel."""
    import django_workerflow as workerflow
    from testproject.shop.models import Order
    from testproject.shop.workflows import MultiParcelOrder

    order = Order.objects.create(
        number=f"PAR-{secrets.token_hex(2).upper()}",
        customer_email="parcels@example.com",
        amount_cents=9900,
    )
    input = {"order_id": order.pk, "parcels": 3}
    workerflow.start(MultiParcelOrder, key=order.workflow_key, input=input)
    return order.number


@dataclass(frozen=True)
class Tour:
    """The keys of the tour's instances."""

    failed: str  # the invoice that fails while its partner is down
    partner_up_at: str  # when the partner is back ("HH:MM:SS UTC"): Retry works after it
    first: str  # the handover under way, showing its progress (1 of 2)
    queued: str  # the handover queued behind it
    held: tuple[str, ...]  # the partner syncs held while their definition is paused
    debounced: str  # the reindex started three times, run once with the last input
    timed_out: str  # the carrier label whose first fetch hangs past its step timeout
    stranded: str = ""  # the newsletter recorded by older code: the current code cannot replay it
    card_payment: str = ""  # the payment whose card number is masked for `support`


SCHEDULE = "demo-minute-count"  # the tour's schedule (testproject/demoapp/workflows.py)
PAUSED = "demo-partner-sync"  # the tour's paused definition
PAUSE_REASON = "partner API down (demo)"
REINDEX_TITLES = ("Blue mug", "Blue mug, 350 ml", "Blue mug, 350 ml, dishwasher-safe")
#: A test card number (the payment networks' documented test number), shown masked.
DEMO_CARD = "4242424242424242"


def start_tour() -> Tour:
    """The tour's instances: an invoice whose partner is down for a minute (it fails); two
    warehouse handovers behind ``max_concurrency = 1`` (the first shows its progress, the
    second is queued); two partner syncs held because their definition is paused first (by
    "demo"); a search reindex started three times, which runs once with the last title (its
    definition's ``debounce``); a carrier label whose first fetch hangs, interrupted by its
    1 s step ``timeout`` and retried 3 s later; a card payment whose card number is a
    sensitive field. The schedule needs no start: it fires every
    minute on its own."""
    from datetime import timedelta

    from django.utils import timezone

    import django_workerflow as workerflow

    stamp = secrets.token_hex(2).upper()
    # First: the oldest of the tour, they sit below the others in the list (newest first),
    # so the first screen of the list shows the instances the tour starts with.
    stranded = start_stranded_newsletter(stamp)
    payment = workerflow.start(
        "demo-card-payment",
        key=f"payment-{stamp}",
        input={"card": {"number": DEMO_CARD, "expiry": "12/30"}, "amount_cents": 4200},
    )
    up_at = timezone.now() + timedelta(minutes=1)
    invoice = workerflow.start(
        "demo-invoice",
        key=f"invoice-{stamp}",
        input={"order_number": f"ORD-{stamp}", "partner_up_at": up_at.isoformat()},
    )
    handovers = [
        workerflow.start(
            "demo-warehouse-handover",
            key=f"handover-{stamp}-{turn}",
            input={"warehouse": "paris-1", "batch": f"{stamp}-{turn}"},
        ).key
        for turn in ("first", "queued")
    ]
    # Paused before the starts: no attempt of theirs runs until it is resumed.
    workerflow.pause_definition(PAUSED, reason=PAUSE_REASON, actor="demo")
    held = tuple(
        workerflow.start(
            PAUSED, key=f"sync-{stamp}-{n}", input={"order_number": f"ORD-{stamp}-{n}"}
        ).key
        for n in (1, 2)
    )
    for title in REINDEX_TITLES:  # a burst of edits: each start puts the run off again
        reindex = workerflow.start(
            "demo-search-reindex", key=f"reindex-{stamp}", input={"title": title}
        )
    label = workerflow.start(
        "demo-carrier-label", key=f"label-{stamp}", input={"parcel": f"PCL-{stamp}"}
    )
    return Tour(
        failed=invoice.key,
        partner_up_at=f"{up_at:%H:%M:%S} UTC",
        first=handovers[0],
        queued=handovers[1],
        held=held,
        debounced=reindex.key,
        timed_out=label.key,
        stranded=stranded,
        card_payment=payment.key,
    )


def start_stranded_newsletter(stamp: str) -> str:
    """A newsletter instance whose history was recorded by the code before a deploy renamed
    its step 'welcome' to 'send-welcome': run here, with that older code registered in this
    process only and no bell queued, to its week-long sleep. The worker and the web server
    run the current code, which cannot replay it: its replay verdict is "no"."""
    from datetime import timedelta

    import django_workerflow as workerflow
    from django_workerflow import WorkflowDefinition, testing
    from django_workerflow.runtime.tick import tick
    from django_workerflow.workers import bells

    def before_the_deploy(self: WorkflowDefinition) -> str:
        email = self.input["email"]
        self.run("subscribe", lambda: {"subscribed": email})
        self.run("welcome", lambda: {"mailed": email})
        self.sleep("wait-a-week", timedelta(days=7))
        return "done"

    with testing.registered(), bells.suppressed():
        attrs = {"name": "demo-newsletter", "version": "1", "execute": before_the_deploy}
        type("Newsletter", (WorkflowDefinition,), {**attrs, "__module__": __name__})
        instance = workerflow.start(
            "demo-newsletter", key=f"newsletter-{stamp}", input={"email": "reader@example.com"}
        )
        tick(instance.pk)
    return instance.key


def wait_for_failure(key: str, worker_running: Callable[[], bool], timeout: float = 30) -> bool:
    """Wait until the worker has failed the tour's invoice (its start-up output is over);
    False if the worker stopped or the time ran out first."""
    from django_workerflow.models import WorkflowInstance

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker_running():
        if WorkflowInstance.objects.filter(key=key, status="failed").exists():
            return True
        time.sleep(0.5)
    return False


def reminder(port: int, password: str, tour: Tour) -> str:
    """What the demo prints once the worker has started: where, who, and what it seeded."""
    base = f"http://127.0.0.1:{port}"
    return f"""
  The demo is ready. Admin: {base}/admin/workerflow/workflowinstance/
                     Login: admin / {password}
  Seeded for the tour:
  - failed, to Retry or Fork after {tour.partner_up_at}: {tour.failed}
  - queued behind a concurrency limit: {tour.queued}
  - showing its progress bar (1 of 2, waiting for the warehouse): {tour.first}
  - held by their paused definition, {PAUSED}: {", ".join(tour.held)}
    Resume it on {definitions_url(base)}
  - started three times, run once with the last title (debounced): {tour.debounced}
  - interrupted by its 1 s step timeout, then retried: {tour.timed_out}
  - its card number masked (••••) for the support login: {tour.card_payment}
  - {SCHEDULE}, a schedule firing every minute: Workflows > Workflow schedules
  - stranded, its history recorded by older code: {tour.stranded}
    Filter the list by "replays on current code: no"
  Press Ctrl-C to stop.
"""


def banner(port: int, password: str, orders: list[str], tour: Tour) -> str:
    """What the demo prints once it has seeded: where, who, the orders and the tour."""
    from django.db import connection

    base = f"http://127.0.0.1:{port}"
    database = f"{connection.display_name}: {Path(connection.settings_dict['NAME']).name}"
    return f"""
  django-workerflow demo is running (worker + web server, {database})

  Admin:     {base}/admin/workerflow/workflowinstance/
  Login:     admin / {password}
             support / {password}  (staff who may not see sensitive values)
  Shop:      {base}/shop/orders/   (place orders, pay them)

  Example orders: {", ".join(orders)}. The paid one retries its charge, sleeps 20 s,
  then waits for approval: select it in the admin and use "Send event" with the event
  name order.approved and the payload {{"by": "you"}}. The PAR- order ships three parcels,
  each a child workflow: its page links them (filter "level: Top-level" hides children).
  The orders carry attributes (customer, region, stage): filter the list "By attribute
  region", or type customer=paid@example.com in its search box.

  The tour, to try the console's controls:
  - {tour.failed} fails: its invoicing partner is down until {tour.partner_up_at}.
    After that, open it and press "Retry" (or "Fork..." to start a copy).
  - {tour.first} shows its progress bar on its page (1 of 2: waiting for the
    warehouse). {tour.queued} is queued behind it (one handover per warehouse at a
    time): send {tour.first} the event warehouse.handed-over and the queued one starts.
  - {PAUSED} is paused ("{PAUSE_REASON}", by demo): {tour.held[0]} and
    {tour.held[1]} wait, pending. Press its Resume on the Definitions page,
    {definitions_url(base)}
    (or run `manage.py workerflow resume-definition {PAUSED}`): they complete.
  - {tour.debounced} was started three times in a row (debounced): it runs once, 5 s after
    the last start, with the last title.
  - {tour.timed_out} fetches a label from a carrier that never answers its first request:
    its 1 s step timeout interrupts it, and its page shows that attempt failed with
    StepTimeoutError; the retry 3 s later gets the label and the instance completes.
  - {tour.card_payment} paid by card: log in as support and its card number reads ••••
    (a sensitive field); as admin, who may see sensitive values, it reads in full.
    `manage.py workerflow show {tour.card_payment}` masks it too, unless --reveal.
  - {SCHEDULE} runs every minute, Paris time: see Workflows > Workflow schedules.
  - {tour.stranded} was recorded before a deploy renamed its step 'welcome' to
    'send-welcome': its page says it does not replay on the current code, and why. Within
    a minute the list's filter "replays on current code: no" finds it; select it and use
    "Fork stranded workflows onto the current version..." (or "Cancel selected workflows...").

  Press Ctrl-C to stop.
"""


def definitions_url(base: str) -> str:
    """The admin's Definitions page, where a paused definition is resumed."""
    from django.urls import reverse

    return f"{base}{reverse('admin:workerflow_definitions')}"


if __name__ == "__main__":
    sys.exit(main())
