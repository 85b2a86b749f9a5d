"""Exceptions: the step outcome errors name their step without changing how they are built."""

from __future__ import annotations

import pickle

import pytest

from django_workerflow.exceptions import (
    MaxAttemptsExceededError,
    NonRetryableStepError,
    WaitStepTimedOutError,
    WorkerflowError,
)

STEP_ERRORS = [NonRetryableStepError, MaxAttemptsExceededError, WaitStepTimedOutError]


@pytest.mark.parametrize("error_class", STEP_ERRORS)
def test_step_error__step_id_is_a_keyword_defaulting_to_none(error_class):
    raised_by_user_code = error_class("card declined")
    named = error_class("card declined", step_id="charge")

    assert raised_by_user_code.step_id is None
    assert named.step_id == "charge"
    assert str(named) == "card declined"
    assert named.args == ("card declined",)
    assert isinstance(named, WorkerflowError)


@pytest.mark.parametrize("error_class", STEP_ERRORS)
def test_step_error__survives_pickling_with_its_step_id(error_class):
    copy = pickle.loads(pickle.dumps(error_class("late", step_id="payment")))

    assert (type(copy), copy.args, copy.step_id) == (error_class, ("late",), "payment")
