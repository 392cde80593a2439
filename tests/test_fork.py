"""Forking a recorded run at a decision point with another runbook."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import orchestrator
from orchestrator.runs.fork import fork
from tests.helpers import check_score_record, gameday

HERE = Path(__file__).parent
MINI = str(HERE / "playbooks" / "mini_loop.yaml.j2")
FIX = str(HERE / "playbooks" / "fix_early.yaml")


@pytest.fixture(scope="module")
def original(tmp_path_factory, runbook_file):
    """The fix shipped late (00:12): the loop runs for nine minutes."""
    late = runbook_file("fix-late", [{"name": "fix", "when": {"at": "00:12"}, "do": "fix_backoff"}])
    return orchestrator.run(MINI, runbook=late, seed=2, out=tmp_path_factory.mktemp("orig") / "run"), late


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_a_fork_is_the_original_up_to_t_and_differs_after_when_the_runbook_acts_earlier(original, tmp_path):
    run, _ = original
    result = fork(run.dir, "00:06", FIX, tmp_path / "fork")
    t = 360
    a, b = pd.read_csv(run.dir / "metrics.csv"), pd.read_csv(tmp_path / "fork" / "metrics.csv")
    pd.testing.assert_frame_equal(a.iloc[:t], b.iloc[:t])  # tick for tick up to the fork
    assert not a.iloc[t:].equals(b.iloc[t:].set_index(a.index[t:]))
    assert [e for e in events(run.dir) if e["tick"] < t] == [e for e in events(tmp_path / "fork") if e["tick"] < t]
    asked = [e for e in events(tmp_path / "fork") if e["event"] == "action_requested"]
    assert [(e["tick"], e["action"]) for e in asked] == [(t, "fix_backoff")]  # the new runbook acts at once
    loop = next(d for d in result["differences"] if d["measure"] == "loop broken")
    assert loop["minutes"] < -3 and "sooner" in loop["text"]
    meta = json.loads((tmp_path / "fork" / "meta.json").read_text())
    assert meta["forked_at_tick"] == t and meta["runbook"] == "fix-early" and meta["runbook_before_fork"] == "fix-late"


@pytest.mark.slow
def test_a_fork_replays_as_it_was_played_and_a_fork_of_it_is_it_up_to_t(original, tmp_path):
    """A replay of a fork plays the runbook it started with, hands over at the fork's tick,
    and writes the very same files; a fork of a fork is the fork up to its own tick (both
    used to play the fork's runbook from the first tick)."""
    from orchestrator.runs.runner import replay, same_as_recording
    from reports.analysis import analyse

    run, late = original
    fork(run.dir, "00:06", FIX, tmp_path / "fork")
    again = replay(tmp_path / "fork", tmp_path / "replayed")
    assert same_as_recording(tmp_path / "fork", again.dir) == []
    assert again.meta["takeovers"] == json.loads((tmp_path / "fork" / "meta.json").read_text())["takeovers"]
    assert again.meta["variables"] == run.meta["variables"] != {}  # (the run's copy of its playbook has none)
    report = analyse(again)
    assert report.summary[0].startswith(f"This run is a fork of {run.dir}: runbook fix-late until 00:06:00, then fix-early")
    assert "(a fork at 00:06:00)" in report.title
    fork(tmp_path / "fork", "00:09", late, tmp_path / "fork2")  # (fix-late never acts again: the fix is in)
    t = 540
    a, b = pd.read_csv(tmp_path / "fork" / "metrics.csv"), pd.read_csv(tmp_path / "fork2" / "metrics.csv")
    pd.testing.assert_frame_equal(a.iloc[:t], b.iloc[:t])
    meta = json.loads((tmp_path / "fork2" / "meta.json").read_text())
    assert [(h["tick"], h["runbook"]) for h in meta["takeovers"]] == [(360, "fix-early"), (540, "fix-late")]
    assert same_as_recording(tmp_path / "fork2", replay(tmp_path / "fork2", tmp_path / "replayed2").dir) == []


def test_a_fork_whose_runbook_gives_params_out_of_alphabetical_order_replays_identically(tmp_path):
    """meta.json kept the runbook that took over with its keys sorted, so a replay asked for
    readmit with {every, step} where the fork had asked {step, every}: the same world, and
    a journal that differed (an outsider's replay of a fork said DIFFERENT)."""
    import yaml

    from orchestrator.runs.runner import replay, same_as_recording

    world = {"name": "readmission", "title": "a pause and a readmission",
             "clock": {"start": "00:00", "tick": "1s", "duration": "10m"},
             "services": [{"name": "api", "capacity": 2000}],
             "populations": [{"name": "clients", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "5s"}, "retry": {"max_attempts": 1}}],
             "mitigations": [
                 {"name": "pause", "deploy": False,
                  "effects": [{"target": "clients", "op": "scale_rate", "args": {"factor": 0.0}}]},
                 {"name": "readmit", "deploy": False, "params": {"step": 0.25, "every": "2m"},
                  "effects": [{"target": "clients", "op": "readmit", "args": {"step": "$step", "every": "$every"}}]}]}
    (tmp_path / "world.yaml.j2").write_text(yaml.safe_dump(world, sort_keys=False))
    (tmp_path / "pause.yaml").write_text('name: pause\nrules:\n  - {when: {at: "00:01"}, do: pause}\n')
    (tmp_path / "back.yaml").write_text('name: back\nrules:\n'
                                        '  - {when: {at: "00:03"}, do: {action: readmit, params: {step: 0.5, every: 60}}}\n')
    run = orchestrator.run(str(tmp_path / "world.yaml.j2"), runbook=str(tmp_path / "pause.yaml"), seed=1,
                           out=tmp_path / "run")
    fork(run.dir, "00:02", str(tmp_path / "back.yaml"), tmp_path / "fork")
    asked = [e for e in events(tmp_path / "fork") if e["event"] == "action_started" and e["action"] == "readmit"]
    assert list(asked[0]["params"]) == ["step", "every"]
    assert same_as_recording(tmp_path / "fork", replay(tmp_path / "fork", tmp_path / "replayed").dir) == []


def test_a_fork_finds_a_playbook_files_own_runbook_by_name(tmp_path, monkeypatch):
    """Named, a runbook is one of those beside the run's playbook file (the run directory
    holds a copy of the playbook, with no runbooks beside it)."""
    import shutil

    (tmp_path / "runbooks" / "mini-loop").mkdir(parents=True)  # the playbook's name
    shutil.copy(MINI, tmp_path / "mini_loop.yaml.j2")
    shutil.copy(FIX, tmp_path / "runbooks" / "mini-loop" / "fix_early.yaml")
    # played from the playbook's directory, named relative to it; forked from elsewhere (an
    # outsider trial's fork looked for the runbooks beside a file of that name in its own directory)
    monkeypatch.chdir(tmp_path)
    run = orchestrator.run("mini_loop.yaml.j2", runbook="none", seed=2, out=tmp_path / "none")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    by_name = fork(run.dir, "00:06", "fix_early", tmp_path / "by-name")
    by_file = fork(run.dir, "00:06", FIX, tmp_path / "by-file")
    assert by_name["differences"] == by_file["differences"]
    assert pd.read_csv(tmp_path / "by-name" / "metrics.csv").equals(pd.read_csv(tmp_path / "by-file" / "metrics.csv"))


def test_a_fork_with_the_same_runbook_is_the_original(original, tmp_path):
    run, late = original
    fork(run.dir, "00:06", late, tmp_path / "same")
    pd.testing.assert_frame_equal(pd.read_csv(run.dir / "metrics.csv"), pd.read_csv(tmp_path / "same" / "metrics.csv"))
    forked = [e for e in events(tmp_path / "same") if e["event"] != "forked"]
    assert forked == events(run.dir)


def test_a_fork_of_a_run_whose_action_was_already_asked_does_not_ask_it_again(tmp_path):
    """The original fixed at 00:04; a fork at 00:10 to the same rule under another name
    counts the fix as done and changes nothing."""
    run = orchestrator.run(MINI, runbook=FIX, seed=3, out=tmp_path / "early")
    fork(run.dir, "00:10", str(HERE / "playbooks" / "fix_early_copy.yaml"), tmp_path / "copy")
    pd.testing.assert_frame_equal(pd.read_csv(run.dir / "metrics.csv"), pd.read_csv(tmp_path / "copy" / "metrics.csv"))


@pytest.mark.slow
def test_the_fork_command_says_what_changed_and_refuses_a_time_outside_the_run(original, tmp_path):
    run, _ = original
    code, said, err = gameday(["fork", str(run.dir), "--at", "00:06", "-r", FIX, "--out", str(tmp_path / "f")])
    assert code == 0, err
    assert "fix-late -> fix-early" in said and "loop broken" in said and "sooner" in said
    # its report, as gameday run writes one, whose heuristic does not send the reader to --attribution
    html = tmp_path / "f" / "report" / "report.html"
    assert f"report: {html}" in said and html.exists()
    md = (tmp_path / "f" / "report" / "report.md").read_text()
    assert "a fork's counterfactuals are not played" in md and "--attribution" not in md
    code, _, err = gameday(["fork", str(run.dir), "--at", "23:00", "-r", FIX, "--out", str(tmp_path / "g")])
    assert code == 2 and "--at" in err
    assert not (tmp_path / "g").exists()
    for missing, words in ((tmp_path / "nowhere", "no such directory"), (tmp_path, "it has no meta.json")):
        code, _, err = gameday(["fork", str(missing), "--at", "00:06", "-r", FIX, "--out", str(tmp_path / "h")])
        assert code == 2 and f"{missing} is not a run directory: {words}" in err, err


def test_a_live_teams_run_forks_too(tmp_path):
    """A console-operated world (a live team's run directory) with a command at 00:05;
    forked at 00:08 to a runbook: the prefix, the team's command included, is kept."""
    from orchestrator.runs.runner import RunSpec, WorldRun

    run = WorldRun(RunSpec(playbook=MINI, seed=4, console=True), tmp_path / "team")
    while not run.done:
        if run.tick == 300:
            run.inject("console_command", "operator", {"id": "c1", "action": "shed_load", "params": {"factor": 0.9},
                                                       "by": "alice"}, by="alice")
        run.step()
    run.close("complete")
    fork(tmp_path / "team", "00:08", FIX, tmp_path / "fork")
    a, b = pd.read_csv(tmp_path / "team" / "metrics.csv"), pd.read_csv(tmp_path / "fork" / "metrics.csv")
    pd.testing.assert_frame_equal(a.iloc[:480], b.iloc[:480])
    asked = [(e["tick"], e["action"]) for e in events(tmp_path / "fork") if e["event"] == "action_requested"]
    assert asked == [(300, "shed_load"), (480, "fix_backoff")]


@pytest.mark.slow
def test_every_file_a_run_its_report_and_its_fork_write_is_one_the_run_directory_format_names(tmp_path):
    """reports/rundir.py names the run directory's files once, for writers and readers."""
    from reports import rundir
    from reports.build import write_report

    run = orchestrator.run(MINI, runbook=str(HERE / "playbooks" / "fix_early.yaml"), seed=1, out=tmp_path / "run",
                           attribution=True)
    write_report(run.dir)
    fork(run.dir, "00:02", "none", tmp_path / "fork")
    for d, extra in ((run.dir, {rundir.ATTRIBUTION, rundir.REPORT}), (tmp_path / "fork", {rundir.FORK, rundir.RUNBOOK_BEFORE_FORK})):
        written = {p.name for p in d.iterdir()}
        assert written == {rundir.META, rundir.PLAYBOOK, rundir.VALIDATED, rundir.RUNBOOK, rundir.COLUMNS, rundir.METRICS, rundir.EVENTS,
                           rundir.SCORE} | extra
        assert written <= set(rundir.RUN_FILES)
        header = (d / rundir.METRICS).read_text().splitlines()[0].split(",")
        assert tuple(header[:3]) == rundir.METRIC_INDEX
        first = json.loads((d / rundir.EVENTS).read_text().splitlines()[0])
        assert tuple(first)[:4] == rundir.EVENT_KEYS
        assert json.loads((d / rundir.META).read_text())["status"] == rundir.COMPLETE
        check_score_record(json.loads((d / rundir.SCORE).read_text()))



def test_the_fork_summary_says_when_a_milestone_was_reached_but_did_not_hold():
    from orchestrator.runs.fork import differences

    relapsed = {"reached": False, "relapsed": True, "first_at": {"clock": "09:20:38"}, "clock": None}
    held = {"reached": True, "clock": "10:40:38", "seconds_after_start": 13238.0}
    impact = {"impact": {"weighted_total": 1.0}}
    (loop, _) = differences({"loop_broken": relapsed, **impact}, {"loop_broken": held, **impact})
    assert loop["text"] == "loop broken at 10:40:38, where the original got there at 09:20:38 but did not hold"
    (loop, _) = differences({"loop_broken": held, **impact}, {"loop_broken": relapsed, **impact})
    assert loop["text"] == ("loop broken never in the end (it got there at 09:20:38 but did not hold), where the "
                            "original got there at 10:40:38")
    calm = {"reached": False, "impaired": False, "relapses": []}  # never over its threshold: nothing to reach
    (drained, _) = differences({"backlog_drained": calm, **impact}, {"backlog_drained": calm, **impact})
    assert drained["text"] == "backlog drained: never impaired in either (nothing to reach)"


def test_a_forks_rules_count_their_for_from_before_the_fork(runbook_file, tmp_path):
    """The bridge has been saturated since about 00:03:30: a rule 'utilisation above 0.9
    for 2 minutes' taking over at 00:06 fires when it would have had it been there all
    along, not 2 minutes after the fork (an outsider trial's fork waited its `for` again
    from the fork); the fork is still the original up to 00:06, and replays identically."""
    from orchestrator.runs.runner import replay, same_as_recording

    run = orchestrator.run(MINI, runbook="none", seed=2, out=tmp_path / "none", duration="12m")
    hot = runbook_file("hot", [{"name": "hot", "when": {"metric": "bridge.utilisation", "above": 0.9, "for": "2m"},
                                "do": "fix_backoff"}])
    fork(run.dir, "00:06", hot, tmp_path / "fork")
    fired = [e["tick"] for e in events(tmp_path / "fork") if e["event"] == "rule_fired"]
    # with the rule all along, the world is the same until it first acts: the fork's rule
    # fires then, or at the fork if that was before it
    played = orchestrator.run(MINI, runbook=hot, seed=2, out=tmp_path / "hot", duration="12m")
    alone = played.events.loc[played.events["event"] == "rule_fired", "tick"].tolist()
    assert alone and fired == [max(360, alone[0])] and fired[0] < 360 + 120, (fired, alone)
    assert [e for e in events(run.dir) if e["tick"] < 360] == [e for e in events(tmp_path / "fork") if e["tick"] < 360]
    assert same_as_recording(tmp_path / "fork", replay(tmp_path / "fork", tmp_path / "again").dir) == []


def test_a_forks_runbook_is_checked_against_the_playbook_the_run_recorded_and_says_so(original, runbook_file, tmp_path):
    """A runbook naming a mitigation the run's playbook did not have (added to the file since,
    say) is refused, and the message names the recorded playbook the fork plays (an outsider
    read 'expected a mitigation of ledger' after editing the file, and could not tell why)."""
    from orchestrator.errors import InvalidInput

    run, _ = original
    book = runbook_file("added-since", [{"when": {"at": "00:06"}, "do": "keep_connections"}])
    with pytest.raises(InvalidInput) as err:
        fork(run.dir, "00:05", book, tmp_path / "fork")
    assert "keep_connections" in str(err.value) and f"against the playbook the run recorded, {run.dir}" in str(err.value)
    assert not (tmp_path / "fork").exists()


def test_a_replay_that_differs_says_where(original, tmp_path):
    """A recording altered in one metric at one tick, and in one event: the replay's verdict
    names the tick, its clock and the column, and the event's line and tick (it used to say
    only which file differed)."""
    import shutil

    from orchestrator.runs.runner import same_as_recording

    run, _ = original
    altered = tmp_path / "altered"
    shutil.copytree(run.dir, altered)
    lines = (altered / "metrics.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    row = lines[301].rstrip("\n").split(",")  # tick 300
    col = header.index("clients.ok")
    row[col] = str(float(row[col]) + 1)
    lines[301] = ",".join(row) + "\n"
    (altered / "metrics.csv").write_text("".join(lines))
    events = (altered / "events.jsonl").read_text().splitlines(keepends=True)
    event = json.loads(events[2])
    events[2] = json.dumps({**event, "clock": "99:99"}) + "\n"
    (altered / "events.jsonl").write_text("".join(events))
    assert same_as_recording(altered, run.dir) == [
        f"metrics.csv (first at tick 300 ({row[2]}): clients.ok)",
        f"events.jsonl (first at line 3, tick {event['tick']})"]


def test_a_fork_of_a_run_that_stopped_early_says_so_where_it_compares(tmp_path):
    """The original was interrupted at 00:05 (before its fix at 00:12): the fork plays to the
    scenario's end, and what it compares says the original's figures stop at 00:05."""
    from orchestrator.runs.runner import RunSpec, WorldRun
    from reports import rundir

    late = tmp_path / "late.yaml"
    late.write_text("name: fix-late\nrules:\n  - name: fix\n    when: {at: \"00:12\"}\n    do: fix_backoff\n")
    run = WorldRun(RunSpec(playbook=MINI, runbook=str(late), seed=2), tmp_path / "cut")
    while run.tick < 300:
        run.step()
    run.close(rundir.INTERRUPTED)
    result = fork(tmp_path / "cut", "00:02", FIX, tmp_path / "fork")
    planned = json.loads((tmp_path / "cut" / "meta.json").read_text())["ticks_planned"]
    assert result["original_stopped"] == {"status": "interrupted", "clock": "00:05", "ticks_done": 300,
                                          "ticks_planned": planned}
    texts = [d["text"] for d in result["differences"]]
    assert texts[0] == (f"the original stopped early (interrupted at 00:05, 300 of {planned:,} ticks): its figures "
                        "cover only that part, the fork's the whole scenario")
    loop = next(t for t in texts if t.startswith("loop broken"))
    assert loop.endswith("where the original had not got there when it stopped at 00:05"), loop
    assert texts[-1].endswith("(the original's up to 00:05 only)")
    assert json.loads((tmp_path / "fork" / "meta.json").read_text())["ticks_done"] == planned
    # a whole original says none of it
    whole = fork(tmp_path / "fork", "00:03", FIX, tmp_path / "fork2")
    assert "original_stopped" not in whole and not any("stopped" in d["text"] for d in whole["differences"])
