"""The forms behind retry (a reason) and fork (step, version, key, reason)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from django import forms

from django_workerflow import registry
from django_workerflow.console.rerun_requests import ForkRequest, blocker_note, retry_blockers
from django_workerflow.exceptions import WorkflowInputError, WorkflowNotRegisteredError
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from django_workerflow.values import jsonvalue

REASON_WIDGET = forms.Textarea(attrs={"rows": 3, "cols": 60})


class RetryForm(forms.Form):
    """Confirm a retry, with an optional reason recorded on the instance. When a selected
    instance waits for failed children, the form names them (``notes``) and offers to retry
    them with it (``with_children``)."""

    reason = forms.CharField(
        required=False,
        max_length=1000,
        widget=REASON_WIDGET,
        help_text="Recorded with the retry and in the admin history.",
    )

    def __init__(
        self, data: Any = None, *, instances: Iterable[WorkflowInstance] = (), **kwargs: Any
    ) -> None:
        super().__init__(data, **kwargs)
        # The instances the page lists (the first 100 of a selection).
        blockers = retry_blockers(list(instances)[:100])
        #: One line per instance that waits for failed or cancelled children, naming them.
        self.notes = [blocker_note(instance, blocking) for instance, blocking in blockers]
        failed = [
            c for _, blocking in blockers for c in blocking if c.status == WorkflowStatus.FAILED
        ]
        if failed:
            self.fields["with_children"] = forms.BooleanField(
                required=False,
                label="Also retry the failed children",
                help_text="Retry the failed children listed above with it, in one "
                "transaction, so that it does not meet their failure again.",
            )

    def clean_reason(self) -> str | None:
        return self.cleaned_data["reason"].strip() or None

    @property
    def with_children(self) -> bool:
        return bool(self.cleaned_data.get("with_children"))


class ForkForm(forms.Form):
    """Fork one instance: the step to run anew from (a select of its steps), the version (a
    select of the registered ones), the new key and a reason."""

    from_step = forms.ChoiceField(
        required=False,
        label="Fork from step",
        help_text="This step and every step after it run anew; the settled steps before it are "
        "copied and not run again.",
    )
    version = forms.ChoiceField(
        label="Version", help_text="The version the fork runs; the default is the newest."
    )
    key = forms.CharField(
        required=False,
        max_length=jsonvalue.MAX_IDENTIFIER_LENGTH,
        label="New key",
        help_text="Empty: the source's key followed by ~1, ~2, …",
    )
    reason = forms.CharField(
        required=False,
        max_length=1000,
        widget=REASON_WIDGET,
        help_text="Recorded on both instances and in the admin history.",
    )

    def __init__(self, instance: WorkflowInstance, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        step_ids = Step.objects.filter(instance=instance).order_by("created_at", "id")
        first = ("", "(none: copy every settled step, run the rest)")
        from_step = cast(forms.ChoiceField, self.fields["from_step"])
        from_step.choices = [
            first,
            *((step_id, step_id) for step_id in step_ids.values_list("step_id", flat=True)),
        ]
        name = instance.definition_name
        version = cast(forms.ChoiceField, self.fields["version"])
        version.choices = [(v, f"v{v}") for v in reversed(registry.versions(name))]
        try:
            version.initial = registry.get(name).version
        except WorkflowNotRegisteredError:
            version.help_text = (
                f"No version of workflow '{name}' is registered in this process: deploy "
                "its definition (in a `workflows` module) before forking."
            )

    def clean_key(self) -> str | None:
        key = self.cleaned_data["key"].strip()
        if not key:
            return None
        try:
            return jsonvalue.check_identifier(key, what="The key")
        except WorkflowInputError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_reason(self) -> str | None:
        return self.cleaned_data["reason"].strip() or None

    def fork_request(self) -> ForkRequest:
        """The validated form as a fork request."""
        data = self.cleaned_data
        return ForkRequest(
            from_step=data["from_step"] or None,
            version=data["version"],
            key=data["key"],
            reason=data["reason"],
        )
