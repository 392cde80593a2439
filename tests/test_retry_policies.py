"""Retry policies at 100% failure: amplification (attempts per fresh request) is what the
policy says, and jitter spreads synchronised retries."""
import pytest

from tests.helpers import playbook_path, step_world

LAB = playbook_path("retry_lab")


def amplification(df, skip=120):
    steady = df.iloc[skip:]
    return steady["clients.attempts"].sum() / steady["clients.fresh"].sum()


@pytest.mark.parametrize("max_attempts", [1, 2, 4])
def test_amplification_is_one_plus_retries(max_attempts):
    df = step_world(LAB, {"max_attempts": max_attempts}, duration=600)
    assert df["clients.success_ratio"].iloc[60:].max() == 0.0  # every attempt fails
    assert amplification(df) == pytest.approx(max_attempts, rel=0.02)


def test_no_retries_means_amplification_one():
    df = step_world(LAB, {"max_attempts": 1, "backoff": "none"}, duration=300)
    assert amplification(df) == pytest.approx(1.0, abs=1e-9)


def test_token_bucket_budget_caps_amplification_near_ratio():
    # Unlimited retries would amplify without bound; a 10% budget allows ~0.1 retry per fresh request.
    df = step_world(LAB, {"max_attempts": 0, "budget_ratio": 0.1}, duration=900)
    assert amplification(df, skip=300) == pytest.approx(1.1, abs=0.03)
    unbudgeted = step_world(LAB, {"max_attempts": 0}, duration=900)
    assert amplification(unbudgeted, skip=300) > 2.0


def test_jitter_spreads_synchronised_reconnects():
    """Every client loses its connection at once against a dead device pool: without
    jitter their reconnects come in waves, with full jitter they spread out."""
    def per_tick_variation(jitter):
        df = step_world(LAB, {"mode": "pooled", "surge_fraction": 1.0, "max_attempts": 1, "jitter": jitter},
                        duration=900)
        a = df["clients.conn_attempts"].iloc[120:900]
        return a.std() / a.mean()

    plain, full = per_tick_variation("none"), per_tick_variation("full")
    assert full < plain / 2, (plain, full)


@pytest.mark.parametrize("jitter", ["full", "equal", "decorrelated"])
def test_jittered_policies_keep_retrying_at_a_bounded_rate(jitter):
    df = step_world(LAB, {"mode": "pooled", "surge_fraction": 1.0, "jitter": jitter}, duration=900)
    late = df["clients.conn_attempts"].iloc[600:]
    # 1000 clients with a 64 s cap: never more than one attempt each per (cap/2 .. cap) on average
    assert 1000 / 64 * 0.5 < late.mean() < 1000 / 64 * 4


def test_circuit_breaker_stops_attempts_while_open():
    """At 100% failure an open breaker fails requests at once without touching the
    network, apart from probes; without it every fresh request goes out."""
    closed = step_world(LAB, {"max_attempts": 1}, duration=600)
    breaker = step_world(LAB, {"max_attempts": 1, "breaker": True}, duration=600)
    wire = breaker["clients.attempts"].iloc[120:].sum() / closed["clients.attempts"].iloc[120:].sum()
    assert wire < 0.4, wire
    assert breaker["clients.failed"].iloc[120:].sum() >= 0.99 * closed["clients.failed"].iloc[120:].sum()
