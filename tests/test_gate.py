"""A CI gate (``gameday check``, #46): thresholds as k6 writes them, judged over seeds with
an error rate that holds however early a runbook stops; the example workflow's command
passes and fails as its thresholds say, and its JUnit XML names every check."""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml
import helpers
from orchestrator.errors import InvalidPlaybook
from orchestrator.playbook.checks import validate_playbook
from orchestrator.playbook.loader import load_playbook
from reports.gate import BadThreshold, judge, parse_threshold

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"


@pytest.mark.parametrize("text, metric, wanted", [
    ("p(90) <= 30m", "loop_broken", ("quantile", "<=", 0.9, 1800.0, False)),
    ("median < 1h30m", "backlog_drained", ("quantile", "<", 0.5, 5400.0, False)),
    ("max <= par", "loop_broken", ("quantile", "<=", 1.0, None, True)),
    ("min > 20", "impact", ("quantile", ">", 0.0, 20.0, False)),
    ("avg <= 1,200", "impact", ("mean", "<=", None, 1200.0, False)),
    ("rate >= 90%", "loop_broken", ("rate", ">=", None, 0.9, False)),
])
def test_a_threshold_reads_as_k6_writes_it(text, metric, wanted):
    th = parse_threshold(text, metric)
    assert (th.aggregate, th.op, th.quantile, th.value, th.par) == wanted


@pytest.mark.parametrize("text, metric, said", [
    ("p(95) = 30m", "loop_broken", "AGGREGATE OPERATOR VALUE"),
    ("p(0) <= 30m", "loop_broken", "p(N) with N in 1..100"),
    ("max > 30m", "loop_broken", "min > v"),
    ("min < 3", "impact", "max < v"),
    ("rate >= 90%", "impact", "a time's"),
    ("mean <= par", "impact", "par is a milestone's clock time"),
    ("rate >= 120%", "loop_broken", "a share from 0 to 1"),
    ("p(90) <= soon", "loop_broken", "a duration (30m, 1h30m, 90s) or par"),
    ("mean <= inf", "impact", "a finite value"),
])
def test_a_threshold_that_says_no_check_is_refused_saying_what_was_expected(text, metric, said):
    with pytest.raises(BadThreshold, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_threshold(text, metric)


def rows(values, trigger_s=1800.0) -> list[dict]:
    """Results rows whose loop broke ``values`` seconds after the trigger (inf: never)."""
    return [{"impact": 0.0, "loop_formed": True, "loop_broken_s": v if math.isfinite(v) else math.nan,
             "outcome": "broken" if math.isfinite(v) else "stuck", "trigger_s": trigger_s} for v in values]


def test_a_share_of_seeds_is_proven_only_when_its_exact_bound_clears_the_threshold():
    th = parse_threshold("p(90) <= 30m", "loop_broken")
    # 29 of 29 seeds within 30 minutes: the exact lower bound 0.05^(1/29) = 0.902 clears 90%
    assert judge(rows([600.0] * 29), "loop_broken", th, 0.05).proven
    v = judge(rows([600.0] * 28), "loop_broken", th, 0.05)  # 0.05^(1/28) = 0.899: not yet
    assert v.passed and not v.proven and "not proven at 0.95" in v.confidence
    v = judge(rows([600.0] * 10 + [math.inf, 3600.0]), "loop_broken", th, 0.05)  # one never, one late
    assert not v.passed and "10 of 12 seeds <= 30.0 min" in v.figure and "1 never got there" in v.figure
    failed = judge(rows([600.0] * 5 + [3600.0] * 5), "loop_broken", th, 0.05)
    assert not failed.passed and failed.proven and "at most" in failed.confidence
    # max: every seed; a single late seed proves it failed, and no count of good ones proves it passed
    assert judge(rows([600.0, 3600.0]), "loop_broken", parse_threshold("max <= 30m", "loop_broken"), 0.05).proven
    assert not judge(rows([600.0] * 200), "loop_broken", parse_threshold("max <= 30m", "loop_broken"), 0.05).proven


def test_par_is_the_playbooks_clock_time_for_the_milestone_from_each_runs_trigger():
    th = parse_threshold("max <= par", "loop_broken")
    par_s, start_s = 8 * 3600.0, 7 * 3600.0  # par 08:00, the clock starting 07:00, the trigger at 07:30
    assert judge(rows([1800.0]), "loop_broken", th, 0.05, par_s, start_s).passed  # broken at 08:00: on par
    assert not judge(rows([1801.0]), "loop_broken", th, 0.05, par_s, start_s).passed
    # a later trigger (07:31:40) leaves less time to par: 29m10s after it is 08:00:50, past par
    assert not judge(rows([1750.0], trigger_s=1900.0), "loop_broken", th, 0.05, par_s, start_s).passed


def test_a_mean_is_bounded_by_t_and_a_milestone_never_reached_has_none():
    th = parse_threshold("mean <= 30m", "loop_broken")
    v = judge(rows([1000.0, 1100.0, 1050.0, 1020.0]), "loop_broken", th, 0.05)
    assert v.passed and v.proven and "mean 17.4 min over 4 seeds" in v.figure
    v = judge(rows([1000.0, math.inf]), "loop_broken", th, 0.05)
    assert not v.passed and v.proven and "never" in v.figure


@pytest.mark.slow
def test_stopping_at_the_first_proof_keeps_the_error_rate_under_alpha():
    """Sequential looks after every seed from the third to the 20th, on "median <= 30m":
    where the truth is just the other side of the threshold (45% of seeds within it), a
    pass is proven in at most alpha of 2,000 gates, however early each stopped, while
    judging each look at alpha alone (no correction for looking 18 times) proves it wrongly
    more often than alpha; where it comfortably holds (95%), gates prove it and stop early."""
    rng = np.random.default_rng(7)
    th = parse_threshold("median <= 30m", "loop_broken")
    alpha, first, most = 0.1, 3, 20
    looks = most - first + 1

    def gate(share: float, looks: int) -> tuple[bool, int]:
        x = np.where(rng.random(most) < share, 600.0, 3600.0)
        for n in range(first, most + 1):
            v = judge(rows(x[:n]), "loop_broken", th, alpha, looks=looks)
            if v.proven:
                return v.passed, n
        return False, most  # (not proven: no claim)

    corrected = sum(gate(0.45, looks)[0] for _ in range(2000)) / 2000
    uncorrected = sum(gate(0.45, 1)[0] for _ in range(2000)) / 2000
    assert corrected <= alpha < uncorrected, (corrected, uncorrected)
    early = [gate(0.95, looks) for _ in range(300)]
    assert sum(1 for ok, n in early if ok and n < most) > 270, early[:10]


def test_a_playbooks_checks_are_validated_with_it(tmp_path):
    pb = load_playbook("us-east-1-2021")
    doc = yaml.safe_load(pb.text)
    doc["checks"] = [{"metric": "loop_broken", "threshold": "p(90) <= soon"},
                     {"metric": "impact", "threshold": "mean <= par"},
                     {"metric": "latency", "threshold": "max <= 1"},
                     {"metric": "first_customer_update", "threshold": "max <= par"}]
    with pytest.raises(InvalidPlaybook) as e:
        validate_playbook(doc, "x.yaml")
    said = {i.location: i.expected for i in e.value.issues}
    assert set(said) == {"checks[0].threshold", "checks[1].threshold", "checks[2].metric"}, said
    doc["par"] = {}
    doc["checks"] = [{"metric": "loop_broken", "threshold": "max <= par"}]
    with pytest.raises(InvalidPlaybook, match=r"checks\[0\].threshold.*a par for loop_broken"):
        validate_playbook(doc, "x.yaml")


def gameday(*args: str):
    return helpers.gameday(list(args))


def workflow_command() -> list[str]:
    """The `gameday check` the example workflow runs, as its words."""
    flow = yaml.safe_load((EXAMPLES / "gameday-check.yml").read_text())
    runs = [s["run"] for s in flow["jobs"]["gate"]["steps"] if "run" in s and s["run"].startswith("gameday check")]
    assert len(runs) == 1, runs
    return runs[0].split()[2:]


@pytest.mark.slow
def test_the_example_workflows_gate_passes_and_a_threshold_that_must_fail_fails_it(tmp_path, monkeypatch):
    """The example workflow's command on the built-in us-east-1-2021 (three seeds or two, in
    this process, to keep the test short: options written after it win): it passes and writes
    JUnit XML with a test case per check; the same with a check the runbook cannot keep
    (the loop broken within 10 minutes of the trigger in every seed) exits 1 and names it;
    --strict fails a check passed but not proven."""
    monkeypatch.chdir(ROOT)
    quick = ["--seeds", "3", "--serial", "--junit", str(tmp_path / "junit.xml")]
    code, out, err = gameday("check", *workflow_command(), *quick)
    assert code == 0, out + err
    assert "runbook protect-early: 3 of at most 3 seeds" in out and "3 of 3 checks passed" in out, out
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.tag == "testsuites" and suite.get("tests") == "3" and suite.get("failures") == "0"
    cases = suite.findall("./testsuite/testcase")
    wanted = [c["name"] for c in yaml.safe_load((EXAMPLES / "checks.yaml").read_text())["checks"]]
    assert [c.get("name") for c in cases] == wanted
    assert all(c.find("failure") is None and "seeds" in c.findtext("system-out") for c in cases)

    failing = tmp_path / "failing.yaml"
    failing.write_text(yaml.safe_dump({"checks": [{"metric": "impact", "threshold": "mean <= 400"},
                                                  {"name": "broken within 10 minutes", "metric": "loop_broken",
                                                   "threshold": "max <= 10m"}]}))
    quicker = quick + ["--seeds", "2", "--first-seeds", "2"]
    code, out, err = gameday("check", "us-east-1-2021", "-r", "protect-early", "--duration", "2h", "--checks",
                             str(failing), *quicker)
    assert code == 1, out + err
    assert "FAIL  broken within 10 minutes: loop_broken max <= 10m" in out and "1 of 2 checks passed" in out, out
    failures = ET.parse(tmp_path / "junit.xml").getroot().findall(".//failure")
    assert len(failures) == 1 and failures[0].get("message").startswith("failed: loop_broken max <= 10m: 0 of 2")

    code, out, err = gameday("check", *workflow_command(), *quicker, "--strict")
    assert code == 1 and "FAIL  customers hear from us before the historical team's first update" in out, out


def test_a_gate_with_nothing_to_check_or_a_bad_checks_file_exits_2_before_any_run(tmp_path):
    code, out, err = gameday("check", "us-east-1-2021", "--serial")
    assert code == 2 and "--checks" in err and "declares none" in err and "Traceback" not in err, err
    bad = tmp_path / "bad.yaml"
    bad.write_text("checks:\n  - metric: loop_broken\n    threshold: p(90) < never\n")
    code, out, err = gameday("check", "us-east-1-2021", "--checks", str(bad), "--serial")
    assert code == 2 and "checks[0].threshold" in err and "'p(90) < never'" in err, err
    code, out, err = gameday("check", "us-east-1-2021", "--checks", str(tmp_path / "missing.yaml"), "--serial")
    assert code == 2 and "missing.yaml" in err, err
    code, out, err = gameday("check", "us-east-1-2021", "--checks", str(EXAMPLES / "checks.yaml"), "--junit",
                             str(tmp_path / "no" / "such" / "junit.xml"))
    assert code == 2 and "--junit" in err and "folder does not exist" in err, err
