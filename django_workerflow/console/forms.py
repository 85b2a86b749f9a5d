"""The forms behind the console's actions that take input: cancel and send event."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from django import forms

from django_workerflow.definition import drift
from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.models import WorkflowInstance
from django_workerflow.values import jsonvalue


class CancelForm(forms.Form):
    """Confirm a cancellation, with an optional reason recorded on the instance."""

    reason = forms.CharField(
        required=False,
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Recorded with the cancellation and in the admin history.",
    )

    def clean_reason(self) -> str | None:
        return self.cleaned_data["reason"].strip() or None


class SendEventForm(forms.Form):
    """An event name and a JSON payload; invalid JSON is a form error and nothing is sent."""

    event_name = forms.CharField(max_length=jsonvalue.MAX_IDENTIFIER_LENGTH)
    payload = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false"}),
        help_text='JSON, for example {"amount": 42}. Empty means null.',
    )
    # A new key per page shown: submitting the same page twice (a double click, a resubmit
    # after an error) sends the event once.
    idempotency_key = forms.CharField(
        required=False,
        max_length=jsonvalue.MAX_IDENTIFIER_LENGTH,
        widget=forms.HiddenInput,
        initial=lambda: uuid.uuid4().hex,
    )

    def clean_idempotency_key(self) -> str | None:
        return self.cleaned_data["idempotency_key"].strip() or None

    def clean_event_name(self) -> str:
        name = self.cleaned_data["event_name"]
        try:
            return jsonvalue.check_identifier(name, what="The event name")
        except WorkflowInputError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_payload(self) -> Any:
        text = self.cleaned_data["payload"].strip()
        if not text:
            return None
        try:
            jsonvalue.check_nesting(text, what="The payload")
        except WorkflowInputError as exc:
            raise forms.ValidationError(str(exc)) from exc
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"This is not valid JSON: {exc}.") from exc
        try:
            jsonvalue.dumps(value, what="The payload")
        except WorkflowInputError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return value


def awaited_event_initial(instances: Iterable[WorkflowInstance]) -> dict[str, str]:
    """The send-event form's initial data: the event name the instances' waiting steps
    await, when they all await the same one (otherwise nothing is pre-filled)."""
    names: set[str] = set()
    for instance in instances:
        names.update(drift.awaited_event_names(instance))
        if len(names) > 1:
            return {}
    return {"event_name": names.pop()} if names else {}
