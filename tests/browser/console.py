"""What the browser tests share: the admin user's password, the console's list page, and
logging in and finding things on it."""

from __future__ import annotations

import re
from typing import Any

PASSWORD = "correct horse battery staple"
CHANGELIST = "/admin/workerflow/workflowinstance/"


def login(page: Any, live_server: Any, username: str) -> None:
    # Late: playwright is optional, and the test modules skip themselves without it.
    from playwright.sync_api import expect

    page.goto(f"{live_server.url}/admin/login/?next={CHANGELIST}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page).to_have_url(re.compile(re.escape(CHANGELIST) + "$"))


def row(page: Any, key: str) -> Any:
    return page.locator("#result_list tbody tr", has=page.get_by_role("link", name=key))


def message(page: Any) -> Any:
    return page.locator("ul.messagelist li")
