"""The flagship scenario's acceptance: the loop emerges, history replays in shape,
mitigations behave as physics says, and the operators are blind for real.

All of this is ground truth from the metrics of in-process runs; nothing in the
playbook scripts "congested until X".
"""
from __future__ import annotations


import pandas as pd
import pytest

from reports.timefmt import parse_clock

pytestmark = pytest.mark.slow  # hours of the 2021 scenario

START = parse_clock("07:00")


def at(clock: str) -> int:
    """Tick of a clock time (1 s ticks from 07:00)."""
    return int(parse_clock(clock) - START)


def window(df: pd.DataFrame, start: str, end: str) -> pd.DataFrame:
    return df.iloc[at(start):at(end)]


def setup_success(df: pd.DataFrame) -> float:
    return (df["bridge.setups"] * df["bridge.setup_success_ratio"]).sum() / df["bridge.setups"].sum()


def clock_s(milestone: dict) -> float:
    assert milestone["reached"], milestone
    return parse_clock(milestone["clock"])


def effective_tick(events: pd.DataFrame, action: str) -> int:
    rows = events[(events["event"] == "action_effective") & (events["action"] == action)]
    assert len(rows) == 1, f"{action} never took effect"
    return int(rows["tick"].iloc[0])


# -- metastability ------------------------------------------------------------------------

def test_with_nobody_acting_the_bridge_is_still_congested_12_hours_after_the_trigger(run_2021):
    r = run_2021("none")
    m = r.metrics
    trigger_end = window(m, "07:45", "08:00")
    assert trigger_end["triggers.fired"].sum() == 0
    late = window(m, "19:30", "19:40")  # 12 hours after the 07:30 trigger
    assert late["bridge.utilisation"].mean() > 0.99
    assert setup_success(late) < 0.3
    assert late["internal-clients.error_ratio"].mean() > 0.8
    assert r.score["loop_formed"] and not r.score["loop_broken"]["reached"]


def test_without_the_latent_bug_the_same_trigger_is_a_dip_that_heals_within_30_minutes(run_2021):
    r = run_2021("bug-off")
    m = r.metrics
    assert setup_success(window(m, "07:31", "07:36")) < 0.5  # the dip is real
    assert r.score["loop_formed"]
    assert clock_s(r.score["loop_broken"]) <= parse_clock("08:00")
    assert setup_success(window(m, "08:00", "09:00")) > 0.99


def test_without_a_trigger_nothing_degrades(run_2021):
    r = run_2021("no-trigger")
    m = r.metrics
    assert m["bridge.utilisation"].max() < 0.8
    assert m["bridge.setup_success_ratio"].iloc[10:].min() > 0.99
    assert m["dns-lookups.error_ratio"].iloc[10:].max() < 0.01
    assert not r.score["loop_formed"]


# -- history replays in shape ---------------------------------------------------------------

def test_historical_dns_move_fixes_dns_while_the_bridge_stays_congested(historical):
    m, ev = historical.metrics, historical.events
    moved = effective_tick(ev, "move_dns_off_bridge")
    recovered = clock_s(historical.score["recovered"]["dns-lookups"]) - START
    assert 0 <= recovered - moved <= 15 * 60
    after = m.iloc[int(recovered) + 60:int(recovered) + 1800]
    assert after["dns-lookups.error_ratio"].mean() < 0.01
    assert setup_success(after) < 0.5  # the loop goes on


def test_historical_loop_breaks_and_devices_recover_near_aws_times(historical):
    s = historical.score
    assert abs(clock_s(s["loop_broken"]) - parse_clock("13:34")) <= 45 * 60
    assert abs(clock_s(s["devices_healthy"]) - parse_clock("14:22")) <= 45 * 60


def test_historical_backlog_drains_hours_later_near_1840(historical):
    s = historical.score
    drained = clock_s(s["backlog_drained"])
    assert abs(drained - parse_clock("18:40")) <= 60 * 60
    assert drained - clock_s(s["devices_healthy"]) >= 3 * 3600


def test_first_customer_update_waits_for_the_dashboard_failover(historical):
    ev = historical.events
    posted = ev[ev["event"] == "status_posted"]
    failover = ev[ev["event"] == "status_failover"]
    assert len(posted) >= 1
    requested = ev[(ev["event"] == "action_requested") & (ev["action"] == "post_status_update")]["tick"].min()
    assert posted["tick"].min() > requested  # posting did not go through at once
    assert len(failover) == 1 and failover["tick"].iloc[0] <= posted["tick"].min()


# -- mitigations behave as physics says ----------------------------------------------------

def test_dns_move_alone_does_not_break_the_loop(run_2021):
    r = run_2021("dns-only")
    assert r.score["recovered"]["dns-lookups"]["reached"]
    assert not r.score["loop_broken"]["reached"]
    assert setup_success(window(r.metrics, "10:00", "11:00")) < 0.5  # an hour and more after the move


def test_historical_capacity_addition_alone_does_not_break_the_loop(run_2021):
    r = run_2021("capacity-only")
    assert effective_tick(r.events, "add_capacity") < at("14:00")
    assert r.metrics["bridge.devices"].iloc[-1] == 12
    assert not r.score["loop_broken"]["reached"]
    assert setup_success(window(r.metrics, "15:00", "16:00")) < 0.5


def test_device_protection_switched_on_early_breaks_the_loop(run_2021):
    r = run_2021("protect-early")
    assert effective_tick(r.events, "enable_protection") < at("08:15")
    assert clock_s(r.score["loop_broken"]) < parse_clock("08:45")
    assert setup_success(window(r.metrics, "09:00", "10:00")) > 0.95


def test_device_restart_makes_things_worse_before_better(run_2021):
    """In a healthy world, rebooting the bridge drops every connection: errors during the
    reboot, then a reconnect surge, then back to normal."""
    r = run_2021("restart")
    m = r.metrics
    done = effective_tick(r.events, "restart_devices")
    before = m.iloc[done - 600:done]
    during = m.iloc[done + 1:done + 120]
    surge = m.iloc[done + 120:done + 400]
    later = m.iloc[done + 1800:done + 2400]
    base_attempts = before["internal-clients.conn_attempts"].mean()
    assert during["internal-clients.error_ratio"].mean() > 0.9 > before["internal-clients.error_ratio"].mean()
    assert surge["internal-clients.conn_attempts"].max() > 5 * base_attempts  # the reconnect surge
    assert later["internal-clients.error_ratio"].mean() < 0.01  # better again
    assert later["internal-clients.connected"].mean() > 0.99 * 85000
    assert r.score["collateral"]["connections_broken_by_actions"] > 0.9 * 125000


# -- operators are blind for real ----------------------------------------------------------

# (tests/playbooks/runbooks/blind.yaml: a "utilisation alarm" rule on bridge-hot and a
# "no data for 5 minutes" rule on bridge.utilisation)


def rule_fired(r, name: str) -> bool:
    ev = r.events
    return bool(((ev["event"] == "rule_fired") & (ev["rule"] == name)).any())


def test_during_congestion_the_observed_view_has_gaps(run_2021):
    r = run_2021("blind")
    m = r.metrics
    assert window(m, "07:05", "07:29")["monitoring.visibility"].min() == 1.0
    assert window(m, "08:00", "10:00")["monitoring.visibility"].mean() < 0.4
    assert not rule_fired(r, "utilisation alarm")
    assert rule_fired(r, "no data for 5 minutes")


def test_with_out_of_band_monitoring_the_utilisation_alarm_fires(run_2021):
    r = run_2021("oob")  # the rules of "blind", with monitoring that does not cross the bridge
    assert window(r.metrics, "08:00", "10:00")["monitoring.visibility"].min() == 1.0
    assert rule_fired(r, "utilisation alarm")
    assert not rule_fired(r, "no data for 5 minutes")


# -- ticks converge --------------------------------------------------------------------------

def test_loop_broken_time_converges_as_the_tick_shrinks(run_2021):
    """Protection switched on at 08:00 by a deployment that does not cross the bridge (so
    the action lands at the same simulated time whatever the tick): the time the loop
    takes to break is the physics', and must not depend on the tick."""
    coarse, fine = run_2021("tick1"), run_2021("tick025")
    a = coarse.score["loop_broken"]["seconds_after_trigger"]
    b = fine.score["loop_broken"]["seconds_after_trigger"]
    assert abs(a - b) / a <= 0.05, (a, b)
    assert len(fine.metrics) == 4 * len(coarse.metrics)
