"""Attribution by counterfactual (orchestrator/runs/attribution.py): which action broke the
loop is answered by playing the run again from the moment each action took effect,
without it. tests/playbooks/relapse.yaml.j2: pausing delivery stops the feedback (the
worker idle) only while the jobs are held back: the loop is suspended, not broken; jobs
let back later at a pace below capacity break it with all of the demand back. The pause
and the readmission were both needed (without the readmission the demand never came
back: holding it back is never credited for good); an action that changed nothing was
not."""
from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator
from orchestrator.runs import attribution
from reports.analysis import analyse

RELAPSE = str(Path(__file__).parent / "playbooks" / "relapse.yaml.j2")
RULES = [{"when": {"at": "00:09"}, "do": "announce"},  # changes nothing
         {"when": {"at": "00:12"}, "do": "pause_jobs"},
         {"when": {"at": "00:20"}, "do": {"action": "release_jobs", "params": {"factor": 0.19}}}]


@pytest.fixture(scope="module")
def cut_and_readmit(runbook_file, tmp_path_factory):
    return orchestrator.run(RELAPSE, runbook=runbook_file("cut-readmit", RULES), seed=1, attribution=True,
                            out=tmp_path_factory.mktemp("attribution") / "run")


def test_the_counterfactual_needs_the_cut_and_the_readmission_not_the_action_that_changed_nothing(cut_and_readmit):
    att = cut_and_readmit.attribution
    assert cut_and_readmit.score["loop_broken"]["reached"] and att["loop_broken"] == cut_and_readmit.score["loop_broken"]["clock"]
    assert att["loop_broken"][:5] == "00:20"  # (paused, it was only suspended)
    assert [c["action"] for c in att["counterfactuals"]] == ["release_jobs", "pause_jobs", "announce"]
    release, pause, noop = att["counterfactuals"]
    # without the readmission the jobs stay paused: suspended to the end, never broken
    assert release["loop_broken_without"] is None and release["played_until"] == "00:45" and release["mattered"]
    assert pause["loop_broken_without"] is None and pause["mattered"]
    # without an action that changed nothing the world is the same world: the loop breaks at the same tick
    assert noop["took_effect"] == "00:09:01" and noop["loop_broken_without"] == att["loop_broken"] and not noop["mattered"]
    assert att["breaker"] in ("pause_jobs", "release_jobs") and sorted(att["needed"]) == ["pause_jobs", "release_jobs"]


def test_the_report_cites_the_counterfactual(cut_and_readmit):
    found = [f for f in analyse(cut_and_readmit).findings if f.kind == "loop_breaker"]
    assert [f.title for f in found] == ["release_jobs broke the loop (pause_jobs was needed too)"]
    assert "without pause_jobs (00:12:01) the loop was still unbroken at 00:45" in found[0].evidence


@pytest.mark.slow
def test_replaying_the_recording_gives_the_same_attribution_as_the_states_kept_during_the_run(cut_and_readmit):
    assert attribution.attribute(cut_and_readmit.dir) == cut_and_readmit.attribution


def test_a_run_whose_loop_never_broke_has_nothing_to_attribute(runbook_file, tmp_path):
    r = orchestrator.run(RELAPSE, runbook="none", seed=1, attribution=True, out=tmp_path / "none", duration="20m")
    assert r.attribution["breaker"] is None and r.attribution["counterfactuals"] == []
    assert "not broken" in r.attribution["text"]


def test_a_repeated_action_does_not_crowd_out_the_others_and_those_left_untested_are_named():
    from orchestrator.runs.attribution import candidates

    def took_effect(tick, action):
        return {"event": "action_effective", "tick": tick, "action": action, "agent": "deployment", "by": "operator"}

    events = [took_effect(10, "pace"), took_effect(20, "purge"), {"event": "applied", "tick": 25},
              took_effect(30, "purge"), took_effect(35, "shed"), took_effect(40, "purge"),
              took_effect(45, "late"), took_effect(50, "purge")]
    picks, untested = candidates(events, loop_tick=50, limit=3)
    # the three that took effect last, each played without from its first taking effect
    assert [(e["action"], e["tick"]) for e in picks] == [("late", 45), ("purge", 20), ("shed", 35)]
    assert untested == ["pace"]
    picks, untested = candidates(events, loop_tick=50, limit=5)
    assert [e["action"] for e in picks] == ["late", "purge", "shed", "pace"] and untested == []


def test_the_actions_needed_besides_the_breaker_are_named_in_its_sentence():
    from orchestrator.runs.attribution import breaker

    def cf(action, tick, later):
        return {"action": action, "tick": tick, "took_effect": f"t{tick}", "later_by_s": later,
                "loop_broken_without": None if later is None else "later", "played_until": "end"}

    shed, lift = cf("shed", 10, None), cf("lift", 20, 600.0)
    who, text = breaker([shed, lift])
    assert who == "shed" and text == ("shed broke the loop: without shed (in effect from t10) the loop was still unbroken "
                                      "at end. lift was needed too: without lift (in effect from t20) the loop broke only "
                                      "at later, 10 minutes later.")
    assert breaker([lift]) == ("lift", "lift broke the loop: without lift (in effect from t20) the loop broke only at later, "
                                       "10 minutes later.")


DRAIN = str(Path(__file__).parent / "playbooks" / "durable_drain.yaml.j2")
#: a 20-minute fault and a worker of 3,500 jobs/s: dispatching at the cap (3,000/s) drains the
#: backlog without a failure; twice the cap overloads the worker, whose failures retry
OVERLOADED_DRAIN = {"fault": 1200, "capacity": 3500}


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.slow
def test_an_action_without_which_the_loop_broke_sooner_delayed_the_break(runbook_file, tmp_path, repeat):
    """Dispatching at twice the cap during the fault makes the drain fail and retry: the
    loop breaks 8 minutes later than without it (00:25:41 with nobody acting). The
    counterfactual says it delayed the break (it used to say it 'did not matter'), and so
    it does when the rule repeats it every 5 minutes: the action is withheld from its first
    taking effect on, each time, as a fork without it plays (withholding only its last
    taking effect, which changed nothing, said it did not matter)."""
    rule = {"when": {"at": "00:10"}, "do": {"action": "set_dispatch", "params": {"factor": 2.0}},
            **({"repeat": True, "every": "5m"} if repeat else {})}
    run = orchestrator.run(DRAIN, runbook=runbook_file(f"twice-the-cap-{repeat}", [rule]), sets=OVERLOADED_DRAIN,
                           attribution=True, out=tmp_path / "run")
    alone = orchestrator.run(DRAIN, runbook="none", sets=OVERLOADED_DRAIN, out=tmp_path / "alone").score["loop_broken"]
    att = run.attribution
    [cf] = att["counterfactuals"]
    assert cf["took_effect"] == "00:10:01" and cf["loop_broken_without"] == alone["clock"]
    assert cf["delayed"] and not cf["mattered"] and att["delayed"] == ["set_dispatch"] and att["breaker"] is None
    assert cf["later_by_s"] < -att["slack_s"] and "set_dispatch delayed the break" in att["text"], att["text"]
    if repeat:
        assert sum(e["event"] == "action_effective" for e in run.events.to_dict("records")) >= 4
    finding = [f for f in analyse(run).findings if f.kind == "loop_breaker"]
    assert finding and finding[0].title == "set_dispatch delayed the break of the loop", finding
