"""Retry policy schedules, equal jitter, retry-after clamping and the error classification table."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest

from durajobs._values.durations import DeclarationInvalid
from durajobs.declare.retry import ErrorClass, RetryPolicy, classify, register_error_class
from durajobs.errors import ErrorCodeDuplicate


def _seconds(delays: list[timedelta]) -> list[float]:
    return [delay.total_seconds() for delay in delays]


def _app_code() -> str:
    """A code no other test (or earlier run in this process) has classified."""
    return f"X_APP_TEST_{uuid.uuid4().hex.upper()}"


# -- schedules ------------------------------------------------------------------------------------


def test_exponential_schedule_doubles_from_the_delay():
    policy = RetryPolicy.of(attempts=5, backoff="exponential", delay="1s")
    assert _seconds(policy.schedule()) == [1, 2, 4, 8]


def test_max_delay_clamps_every_delay():
    policy = RetryPolicy.of(attempts=5, backoff="exponential", delay="1s", max_delay="3s")
    assert _seconds(policy.schedule()) == [1, 2, 3, 3]


def test_linear_schedule_grows_by_the_delay():
    assert _seconds(RetryPolicy.of(attempts=5, backoff="linear", delay="2s").schedule()) == [
        2,
        4,
        6,
        8,
    ]
    clamped = RetryPolicy.of(attempts=5, backoff="linear", delay="2s", max_delay="5s")
    assert _seconds(clamped.schedule()) == [2, 4, 5, 5]


def test_fixed_schedule_repeats_the_delay():
    policy = RetryPolicy.of(attempts=4, backoff="fixed", delay="250ms")
    assert _seconds(policy.schedule()) == [0.25, 0.25, 0.25]


def test_a_single_attempt_has_no_retries():
    assert RetryPolicy.of(attempts=1).schedule() == []


def test_durations_are_accepted_in_every_spelling():
    for spelled in (timedelta(seconds=2), 2, 2.0, "2s", "2000ms"):
        policy = RetryPolicy.of(attempts=3, delay=spelled, jitter=False)
        assert _seconds(policy.schedule()) == [2, 4]


# -- jitter ---------------------------------------------------------------------------------------


def test_jitter_is_on_by_default():
    assert RetryPolicy().jitter is True
    assert RetryPolicy.of().jitter is True


def test_equal_jitter_keeps_each_delay_within_half_and_whole():
    policy = RetryPolicy.of(attempts=6, delay="1s", max_delay="10s")
    for attempt, base in enumerate(policy.schedule(), start=1):
        seen: list[tuple[float, float]] = []

        def lowest(low: float, high: float, seen: list[tuple[float, float]] = seen) -> float:
            seen.append((low, high))
            return low

        assert policy.delay_after(attempt, uniform=lowest) == base / 2
        assert seen == [(base.total_seconds() / 2, base.total_seconds())]
        assert policy.delay_after(attempt, uniform=lambda low, high: high) == base


def test_equal_jitter_with_random_draws_stays_in_range():
    rng = random.Random(20260101)
    policy = RetryPolicy.of(attempts=10, delay="100ms", max_delay="20s")
    for _ in range(200):
        attempt = rng.randint(1, 9)
        base = policy.base_delay(attempt)
        drawn = policy.delay_after(attempt, uniform=rng.uniform)
        assert base / 2 <= drawn <= base
    # the default source of randomness too
    for attempt in range(1, 10):
        base = policy.base_delay(attempt)
        assert base / 2 <= policy.delay_after(attempt) <= base


def test_jitter_off_gives_the_base_delay():
    policy = RetryPolicy.of(attempts=5, delay="1s", jitter=False)

    def never(low: float, high: float) -> float:
        raise AssertionError("jitter=False must not draw")

    assert [policy.delay_after(n, uniform=never) for n in range(1, 5)] == policy.schedule()


# -- retry-after ----------------------------------------------------------------------------------


def test_a_stated_retry_after_replaces_the_backoff():
    policy = RetryPolicy.of(attempts=5, delay="1s", jitter=False)
    assert policy.delay_after(3, retry_after=timedelta(seconds=7)) == timedelta(seconds=7)


def test_a_stated_retry_after_is_clamped_by_max_delay():
    policy = RetryPolicy.of(attempts=5, delay="1s", max_delay="3s", jitter=False)
    assert policy.delay_after(1, retry_after=timedelta(seconds=7)) == timedelta(seconds=3)
    # with jitter a stated time is a floor: spread over [d, 1.25 d], never earlier
    jittered = RetryPolicy.of(attempts=5, delay="1s", max_delay="3s")
    assert jittered.delay_after(
        1, retry_after=timedelta(seconds=7), uniform=lambda low, high: low
    ) == timedelta(seconds=3)
    assert jittered.delay_after(
        1, retry_after=timedelta(seconds=7), uniform=lambda low, high: high
    ) == timedelta(seconds=3.75)


def test_a_stated_retry_after_is_a_floor_even_with_jitter():
    policy = RetryPolicy.of(attempts=3, max_delay="1h")
    stated = timedelta(seconds=7)
    assert policy.delay_after(1, retry_after=stated, uniform=lambda low, high: low) == stated
    assert policy.delay_after(1, retry_after=stated, uniform=lambda low, high: high) == timedelta(
        seconds=8.75
    )


# -- overflow -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [
        RetryPolicy.of(backoff="exponential", delay="1s"),
        RetryPolicy.of(backoff="exponential", delay="1s", max_delay="36500d"),
        RetryPolicy.of(backoff="linear", delay="1s", max_delay="3650d"),
        RetryPolicy.of(backoff="fixed", delay="1d", max_delay="2d"),
    ],
    ids=["exponential", "exponential-century-cap", "linear", "fixed"],
)
@pytest.mark.parametrize("attempt", [33, 64, 10**6, 2**31 - 1, 10**12])
def test_a_huge_attempt_number_does_not_overflow(policy, attempt):
    base = policy.base_delay(attempt)
    assert timedelta(0) < base <= policy.max_delay
    drawn = policy.delay_after(attempt)
    assert base / 2 <= drawn <= base


def test_a_long_delay_with_many_attempts_does_not_overflow():
    policy = RetryPolicy.of(attempts=40, backoff="exponential", delay="6h", max_delay="1d")
    assert policy.base_delay(33) == timedelta(days=1)
    assert policy.schedule()[-1] == timedelta(days=1)


# -- classification -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("X_STEP_DUPLICATE", ErrorClass.TERMINAL),
        ("X_STEP_OUTPUT_INVALID", ErrorClass.TERMINAL),
        ("X_JOB_INPUT_INVALID", ErrorClass.TERMINAL),
        ("X_JOB_TENANT_MISMATCH", ErrorClass.TERMINAL),
        ("X_JOB_ROW_STATUS_UNKNOWN", ErrorClass.TERMINAL),
        ("X_JOB_TIMEOUT", ErrorClass.RETRYABLE),
        ("X_TIMEOUT", ErrorClass.RETRYABLE),
        ("X_DRAINING", ErrorClass.RETRYABLE),
        ("X_DRIVER_UNAVAILABLE", ErrorClass.RETRYABLE),
        ("X_RATE_LIMITED", ErrorClass.RETRY_AFTER),
        ("X_OVERLOADED", ErrorClass.RETRY_AFTER),
        # deliberately unclassified: a worker that lost the row never settles it (R48)
        ("X_JOB_LEASE_LOST", None),
        ("X_JOB_SLOT_LOST", None),
        # unknown codes follow the backoff, never terminal (R47)
        ("X_SOMETHING_NOBODY_DECLARED", None),
        (None, None),
    ],
)
def test_classification_table(code, expected):
    assert classify(code) is expected


def test_registering_a_code_under_another_class_is_refused():
    code = _app_code()
    register_error_class(code, ErrorClass.RETRYABLE)
    with pytest.raises(ErrorCodeDuplicate) as raised:
        register_error_class(code, ErrorClass.TERMINAL)
    assert raised.value.code == "X_ERROR_CODE_DUPLICATE"
    assert classify(code) is ErrorClass.RETRYABLE  # the first classification stands


def test_reclassifying_a_builtin_code_is_refused():
    with pytest.raises(ErrorCodeDuplicate):
        register_error_class("X_JOB_TIMEOUT", ErrorClass.TERMINAL)
    with pytest.raises(ErrorCodeDuplicate):
        register_error_class("X_STEP_DUPLICATE", ErrorClass.RETRYABLE)
    assert classify("X_JOB_TIMEOUT") is ErrorClass.RETRYABLE
    assert classify("X_STEP_DUPLICATE") is ErrorClass.TERMINAL


def test_registering_the_same_class_twice_is_fine():
    code = _app_code()
    register_error_class(code, ErrorClass.TERMINAL)
    register_error_class(code, ErrorClass.TERMINAL)
    assert classify(code) is ErrorClass.TERMINAL
    register_error_class("X_RATE_LIMITED", ErrorClass.RETRY_AFTER)
    assert classify("X_RATE_LIMITED") is ErrorClass.RETRY_AFTER


@pytest.mark.parametrize("error_class", list(ErrorClass))
def test_an_app_can_register_its_own_code(error_class):
    code = _app_code()
    assert classify(code) is None
    register_error_class(code, error_class)
    assert classify(code) is error_class


# -- refused policies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attempts", [0, 1.5, -1, float("nan"), float("inf"), True, False, "3", None]
)
def test_invalid_attempts_are_refused(attempts):
    with pytest.raises(DeclarationInvalid) as raised:
        RetryPolicy.of(attempts=attempts)
    assert raised.value.code == "X_JOB_DECLARATION_INVALID"
    assert raised.value.detail["field"] == "retry.attempts"


def test_a_whole_float_attempt_count_is_an_int():
    policy = RetryPolicy.of(attempts=3.0)
    assert policy.attempts == 3
    assert type(policy.attempts) is int


def test_a_whole_float_attempt_count_becomes_an_int():
    policy = RetryPolicy(attempts=3.0)  # type: ignore[arg-type]
    assert policy.attempts == 3
    assert len(policy.schedule()) == 2


@pytest.mark.parametrize("field", ["delay", "max_delay"])
@pytest.mark.parametrize(
    "value", [0, -1, float("nan"), float("inf"), "0ms", "soon", timedelta(0), True]
)
def test_invalid_delays_are_refused(field, value):
    with pytest.raises(DeclarationInvalid) as raised:
        RetryPolicy.of(**{field: value})
    assert raised.value.detail["field"] == f"retry.{field}"


def test_an_unknown_backoff_is_refused():
    with pytest.raises(DeclarationInvalid) as raised:
        RetryPolicy.of(backoff="random")  # type: ignore[arg-type]
    assert raised.value.detail["field"] == "retry.backoff"
