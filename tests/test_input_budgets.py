"""Hostile input is bounded (issue 44): each case an outside tester found unbounded or ending
in a traceback, written again from its description. ``gameday run`` and ``gameday
playbooks validate`` refuse it at once with exit 2, one message naming where, what and the
budget, no traceback, no run directory. (Templates' budgets: tests/test_template_budget.py;
generated inputs: tests/test_fuzz_input.py.)"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator import budgets
from orchestrator.cli import main
from orchestrator.errors import Issue, shown

CORPUS = Path(__file__).parent / "corpus"
VALID = CORPUS / "valid_minimal.yaml.j2"
HEAD, BODY = VALID.read_text(encoding="utf-8").split("\n---\n", 1)

BILLION_LAUGHS = "\n".join(
    [f'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)])


def refused(tmp_path: Path, *args: str) -> str:
    """``gameday run ARGS`` and ``gameday playbooks validate ARGS`` both refuse: their message."""
    runner = CliRunner()
    with runner.isolated_filesystem(temp_dir=tmp_path) as cwd:
        run = runner.invoke(main, ["run", *args, "--runbook", "none", "--out", "run", "--no-progress"])
        assert run.exit_code == 2 and isinstance(run.exception, SystemExit), (run.exit_code, run.output, run.exc_info)
        assert "Traceback" not in run.output and run.stderr.startswith("error: "), run.output
        assert list(Path(cwd).iterdir()) == []  # no run directory
    check = runner.invoke(main, ["playbooks", "validate", *args])
    assert check.exit_code == 2 and "Traceback" not in check.output, (check.output, check.exc_info)
    assert "\x1b" not in run.stderr + check.stderr
    return run.stderr


def playbook(tmp_path: Path, body: str, head: str = HEAD) -> str:
    path = tmp_path / "hostile.yaml.j2"
    path.write_text(f"{head}\n---\n{body}", encoding="utf-8")
    return str(path)


def test_a_billion_laughs_is_refused_by_its_node_budget_at_its_line(tmp_path):
    err = refused(tmp_path, playbook(tmp_path, BODY + "extras:\n" + "\n".join("  " + x for x in BILLION_LAUGHS.splitlines())))
    assert f"over {budgets.YAML_NODES:,} nodes with its aliases expanded" in err
    body_line = len(HEAD.splitlines()) + 2
    assert f"line {body_line + len(BODY.splitlines()) + 6}," in err  # l5, the first alias whose nodes pass the budget


def test_a_billion_laughs_in_a_variables_default_is_refused(tmp_path):
    head = HEAD + "\n  bomb:\n    description: laughs\n    default:\n" + "\n".join(
        "      " + x for x in BILLION_LAUGHS.splitlines())
    assert "nodes with its aliases expanded" in refused(tmp_path, playbook(tmp_path, BODY, head))


def test_a_structure_that_contains_itself_is_refused(tmp_path):
    err = refused(tmp_path, playbook(tmp_path, BODY + "extras: &loop [1, *loop]\n"))
    assert "the alias *loop inside the node &loop it names" in err


def test_yaml_nested_thousands_deep_is_refused_by_its_depth_budget(tmp_path):
    err = refused(tmp_path, playbook(tmp_path, BODY + "extras: " + "[" * 3000 + "]" * 3000 + "\n"))
    assert f"nested over {budgets.YAML_DEPTH} deep" in err


@pytest.mark.parametrize("name", ["a,b.c", "../x", "a b", "x" * 65, "\x1b[2Jclients", "-leading"])
def test_a_name_outside_the_name_charset_is_refused(tmp_path, name):
    quoted = '"' + name.replace("\x1b", "\\e") + '"'
    err = refused(tmp_path, playbook(tmp_path, BODY.replace("- name: clients", f"- name: {quoted}")))
    assert "populations[0].name" in err and "a name of letters, digits, '-' and '_'" in err


@pytest.mark.parametrize("field, value, expected", [
    ("clients: 1000", "clients: 100000000000000000000000000000", "populations[0].clients"),
    ("rate: 0.05", "rate: 1.0e+300", "a number of at most 1e+15 in size"),
    ("rate: 0.05", "rate: 10000000000000", "clients x rate at most 1e+15 requests/s"),
    ("retry: {max_attempts: 3}", "retry: {max_attempts: 1000000000000}", "populations[0].retry.max_attempts"),
    ("retry: {max_attempts: 3}", "retry: {max_attempts: 3, cap: 1000000000000}", "populations[0].retry.cap"),
    ("capacity_per_device: 250000", "capacity_per_device: " + "9" * 5000, "an integer of 5,000 digits"),
])
def test_a_number_beyond_what_the_model_holds_is_refused_by_validation(tmp_path, field, value, expected):
    assert field in BODY
    assert expected in refused(tmp_path, playbook(tmp_path, BODY.replace(field, value, 1)))


def test_a_set_integer_of_thousands_of_digits_is_refused(tmp_path):
    err = refused(tmp_path, str(VALID), "--set", "device_cpu=" + "7" * 5000)
    assert "device_cpu" in err and "<an integer of" not in err or "digits" in err


@pytest.mark.parametrize("title", ["x" * (budgets.TEXT_CHARS + 1), "a title \x1b]0;pwned\x07 that retitles"])
def test_a_title_too_long_or_with_control_characters_is_refused(tmp_path, title):
    body = BODY.replace("title: A minimal valid playbook for the bad-input corpus",
                        'title: "' + title.replace("\x1b", "\\e").replace("\x07", "\\a") + '"')
    assert "title: got" in refused(tmp_path, playbook(tmp_path, body))


@pytest.mark.parametrize("value, shown", [("!!set {a, b}", "!!set (a set)"), ("!!binary aGk=", "!!binary (bytes)"),
                                          ("!!timestamp 2021-12-07", "!!timestamp (a date or time)")])
def test_yaml_types_json_cannot_hold_are_refused_at_their_line(tmp_path, value, shown):
    body = BODY.replace("title: A minimal valid playbook for the bad-input corpus", f"title: {value}")
    assert shown in refused(tmp_path, playbook(tmp_path, body))


def test_an_unquoted_date_stays_the_text_it_is_written_as(tmp_path):
    body = BODY + "incident: {date: 2021-12-07, began: 2021-12-07 07:30:00}\n"
    runner = CliRunner()
    with runner.isolated_filesystem(temp_dir=tmp_path):
        run = runner.invoke(main, ["run", playbook(tmp_path, body), "--runbook", "none", "--out", "run", "--no-progress",
                                   "--duration", "2m", "--hosting", "inprocess", "--no-report"])
        assert run.exit_code == 0, (run.output, run.exc_info)
        assert json.loads(Path("run/meta.json").read_text())["status"] == "complete"


def test_a_file_beyond_its_budget_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.yaml.j2"
    with path.open("w", encoding="utf-8") as f:
        f.write(f"{HEAD}\n---\n{BODY}\ndescription: '")
        f.write("x" * (budgets.FILE_BYTES + 10))
        f.write("'\n")
    assert f"over {budgets.FILE_BYTES:,} bytes" in refused(tmp_path, str(path))


@pytest.mark.parametrize("source, kind", [("/dev/zero", "a character device"), ("/dev/urandom", "a character device"),
                                          ("fifo", "a FIFO")])
def test_vars_from_anything_but_a_regular_file_are_refused_without_reading(tmp_path, source, kind):
    if source == "fifo":
        source = str(tmp_path / "fifo")
        os.mkfifo(source)
    done = threading.Event()
    result = {}

    def go():  # a FIFO without a writer would block an open that waits: the test must not hang with it
        result["err"] = refused(tmp_path / "work", str(VALID), "--vars", source)
        done.set()

    (tmp_path / "work").mkdir()
    threading.Thread(target=go, daemon=True).start()
    assert done.wait(60), "reading --vars blocked"
    assert kind in result["err"] and "expected a regular file" in result["err"]


def test_an_error_shows_a_bounded_prefix_of_any_value():
    nested: list = ["lol"]
    for _ in range(40):
        nested = [nested] * 9  # 9^40 leaves, shared: only what is shown is read
    assert len(str(Issue("x", nested, "y"))) < 200
    assert shown(10 ** 5000) == "<an integer of about 5001 digits>"
    assert shown("a\x1b[2Jb") == "'a\\x1b[2Jb'"
    assert shown({"b": 1, "a": 2}) == "{'b': 1, 'a': 2}"  # in the order written
    assert shown(None) == "nothing"


def test_a_pace_slower_than_the_slowest_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["run", str(VALID), "--runbook", "none", "--speed", "1e-300", "--out",
                                       str(tmp_path / "run"), "--no-progress"])
    assert result.exit_code == 2 and f">= {budgets.SLOWEST_SPEED:g}" in result.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("value, said", [("1.0e+300", "1e+300"), (".nan", "nan"), ("-.inf", "-inf")])
def test_a_set_number_beyond_the_budget_is_refused_naming_the_set(tmp_path, value, said):
    """(It was refused at the field the template pasted it into, with a hint about exponents.)"""
    err = refused(tmp_path, str(VALID), "--set", f"device_cpu={value}")
    assert f"--set device_cpu: got {said}; expected a finite number of at most 1e+15 in size" in err


def test_a_variables_default_beyond_the_budget_is_refused_at_the_header(tmp_path):
    err = refused(tmp_path, playbook(tmp_path, BODY, HEAD.replace("default: 10000", "default: .nan")))
    assert "variables.device_cpu.default: got nan; expected a finite number" in err


@pytest.mark.parametrize("name", ["my-var", "1st", "a\x1b[2J"])
def test_a_variable_the_template_could_not_read_by_its_name_is_refused(tmp_path, name):
    head = HEAD + f'\n  "{name.replace(chr(27), chr(92) + "e")}":\n    default: 1\n    description: odd'
    err = refused(tmp_path, playbook(tmp_path, BODY, head))
    assert "variables: got" in err and "expected a variable name of letters, digits and '_'" in err


def test_a_number_written_as_base_60_is_refused_where_no_time_is_meant(tmp_path):
    """YAML 1.1 reads an unquoted 1:30 as 90: right for a duration, a slip for a count."""
    err = refused(tmp_path, playbook(tmp_path, BODY.replace("capacity_per_device: 250000", "capacity_per_device: 1:30")))
    assert ("conntrack.capacity_per_device: got 1:30; expected a number (YAML 1.1 reads the unquoted 1:30 as 90, "
            "counting in base 60") in err
    ok = CliRunner().invoke(main, ["playbooks", "validate", playbook(tmp_path, BODY.replace("reconnect_delay: 10s",
                                                                                          "reconnect_delay: 1:30"))])
    assert ok.exit_code == 0, ok.output  # (a duration written so is 90 s, as before)


@pytest.mark.parametrize("tag", ['{% include "other.yaml" %}', '{% import "m.j2" as m %}', '{% extends "base" %}'])
def test_a_template_that_includes_another_is_refused_as_such(tmp_path, tag):
    err = refused(tmp_path, playbook(tmp_path, tag + "\n" + BODY))
    assert "a playbook in one file: it cannot include, import or extend another template" in err
    assert "no loader" not in err


def test_a_free_form_nan_is_refused_since_the_run_directory_is_json(tmp_path):
    err = refused(tmp_path, playbook(tmp_path, BODY + "incident: {n: .nan, deep: [1, .inf]}\n"))
    assert "incident.n: got nan; expected a finite number" in err and "incident.deep[1]: got inf" in err


@pytest.mark.parametrize("args, where", [
    ("{target: clients, op: set_retry_policy, args: {cap: 1000000000}}", "args.cap"),
    ("{target: clients, op: set_retry_policy, args: {max_attempts: 1000000}}", "args.max_attempts"),
    ("{target: clients, op: set_request_timeout, args: {seconds: 1000000000}}", "args.seconds"),
    ("{target: clients, op: set_connection, args: {timeout: 1000000000}}", "args.timeout"),
    ("{target: clients, op: set_mode, args: {mode: per_request, over: 1000000000}}", "args.over"),
])
def test_an_operation_argument_gets_the_bound_its_field_has(tmp_path, args, where):
    """Each of these passed validation and ran the model out of memory at the trigger (a
    timing wheel a billion seconds long): the model's limits (agents/limits.py) bound the
    operation's arguments as they bound the fields."""
    body = BODY + f'triggers:\n  - {{name: hot-fix, at: "07:01", effects: [{args}]}}\n'
    err = refused(tmp_path, playbook(tmp_path, body))
    assert f"triggers[0].effects[0].{where}" in err and "a number from 0 to" in err


@pytest.mark.parametrize("field", ["request: {timeout: 1000000000}", "connection: {timeout: 1000000000}"])
def test_a_timeout_longer_than_a_day_is_refused(tmp_path, field):
    body = BODY.replace("    path: [bridge]\n    bugs:", f"    {field}\n    path: [bridge]\n    bugs:", 1)
    err = refused(tmp_path, playbook(tmp_path, body))
    assert f"populations[0].{field.split(':')[0]}.timeout: got 1000000000" in err and "<= 86400" in err, err


@pytest.mark.parametrize("effect, said", [
    ("{target: clients, op: scale_rate, args: {factor: 1000000000000000}}", "over the most the model counts, 1e+15/s"),
    ("{target: clients, op: set_mode, args: {mode: per_request}}, "
     "{target: clients, op: surge, args: {reconnect_fraction: 1000000000000000}}", "over the most the model counts, 1e+15/s"),
    ("{target: clients, op: set_retry_policy, args: {cap: 86400, max_attempts: 1000}}",
     "cells of the clients' timing wheels, over the most the model keeps, 16,777,216"),
])
def test_an_operation_past_what_the_model_holds_is_refused_and_the_world_goes_on(tmp_path, effect, said):
    """What these arguments come to is only known in the world (factors multiply, the clients
    reconnecting, delays over the tick times attempts; each argument is within its range):
    the operation is refused there, before it changes anything, journalled, and the run
    ends complete. (Each ran out of memory or overflowed before.)"""
    from reports.rundir import load_run

    body = BODY + f'triggers:\n  - {{name: flood, at: "07:01", effects: [{effect}]}}\n'
    result = CliRunner().invoke(main, ["run", playbook(tmp_path, body), "--runbook", "none", "--duration", "3m",
                                       "--out", str(tmp_path / "run"), "--no-progress", "--no-report"])
    assert result.exit_code == 0, result.output
    run = load_run(tmp_path / "run")
    assert run.meta["status"] == "complete"
    rejected = run.events[run.events["event"] == "apply_rejected"]
    assert len(rejected) == 1 and said in rejected["reason"].iloc[0], run.events.tail()
    assert f"warning: {rejected['op'].iloc[0]} on clients was refused: asked by flood, 07:01" in result.stderr


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.symlink_to(p.parent / "elsewhere", target_is_directory=True), "is a symbolic link (to "),
    (None, "exists and is not a directory"),
])
def test_an_out_that_is_a_link_or_not_a_directory_says_so(tmp_path, make, expected):
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "out"
    if make is None:
        out = Path("/dev/null")
    else:
        make(out)
    result = CliRunner().invoke(main, ["run", str(VALID), "--runbook", "none", "--out", str(out), "--no-progress"])
    assert result.exit_code != 0 and expected in result.stderr, result.output
    assert "free some space" not in result.stderr and list((tmp_path / "elsewhere").iterdir()) == []


def test_delays_over_a_fine_tick_times_many_attempts_are_refused_before_the_run(tmp_path):
    """Each within its range, together a timing wheel of 864 million cells (7 GB a wheel):
    refused at the tick, the playbook's or --tick's, naming the population and the budget."""
    from agents.limits import MOST_WHEEL_CELLS

    body = BODY.replace("retry: {max_attempts: 3}", "retry: {max_attempts: 1000, cap: 1h}")
    assert CliRunner().invoke(main, ["playbooks", "validate", playbook(tmp_path, body)]).exit_code == 0
    err = refused(tmp_path, playbook(tmp_path, body), "--tick", "0.1s")
    assert "--tick: got 0.1; expected a tick long enough for the delays of populations[0] (clients)" in err
    assert f"over the most the model keeps, {MOST_WHEEL_CELLS:,}" in err
    err = refused(tmp_path, playbook(tmp_path, body.replace("tick: 1s", "tick: 0.1s")))
    assert "clock.tick: got 0.1; expected a tick long enough for the delays of populations[0]" in err


def test_a_rate_scaled_to_tens_of_thousands_of_requests_a_client_keeps_the_model_whole(tmp_path):
    """(Found by setting every operation argument of the test worlds to extremes: a thousand
    pooled clients asked for 86,400 requests each a second counted more clients leaving their
    connections than were connected, and a draw got -1 of them.)"""
    from tests.helpers import playbook_path

    text = Path(playbook_path("flapping")).read_text(encoding="utf-8")
    path = tmp_path / "flapping.yaml.j2"
    path.write_text(text.replace("triggers:", 'triggers:\n  - {name: flood, at: "00:00:10", effects: [{target: '
                                 'nlb-clients, op: scale_rate, args: {factor: 86400}}]}', 1), encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(path), "--runbook", "none", "--duration", "1m", "--out",
                                       str(tmp_path / "run"), "--no-progress", "--no-report", "--no-attribution"])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_a_pooled_surge_of_any_size_is_played_and_a_refused_one_is_in_the_report(tmp_path):
    """Pooled, a client reconnects at most once a tick whatever the fraction: a surge of 1e14
    is played (it was, before the model's bounds). Per request it is requests the model
    counts: refused, and the after-action report says so among its findings."""
    from reports.rundir import load_run

    def run(name: str, effects: str, *more: str):
        body = BODY + f'triggers:\n  - {{name: surge, at: "07:01", effects: [{effects}]}}\n'
        result = CliRunner().invoke(main, ["run", playbook(tmp_path, body), "--runbook", "none", "--duration", "3m",
                                           "--out", str(tmp_path / name), "--no-progress", "--no-attribution", *more])
        assert result.exit_code == 0, result.output
        return load_run(tmp_path / name)

    pooled = run("pooled", "{target: clients, op: surge, args: {reconnect_fraction: 100000000000000}}", "--no-report")
    assert "apply_rejected" not in set(pooled.events["event"]) and pooled.metrics["clients.conn_attempts"].max() > 0
    run("per-request", "{target: clients, op: set_mode, args: {mode: per_request}}, "
                       "{target: clients, op: surge, args: {reconnect_fraction: 100000000000000}}")
    report = (tmp_path / "per-request" / "report" / "report.md").read_text()
    assert "surge on clients was refused" in report and "the run went on without it" in report


def test_a_comparison_of_more_runs_than_its_budget_is_refused_before_any_is_planned(tmp_path):
    """(A 2000 x 2000 phase map of 3 seeds planned 12 million runs, 4 GB, before its time limit said no.)"""
    result = CliRunner().invoke(main, ["phasemap", str(VALID), "--x", "bridge_devices=" + ",".join(map(str, range(1, 2001))),
                                       "--y", "device_cpu=" + ",".join(map(str, range(1000, 3001))),
                                       "--out", str(tmp_path / "map")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"expected at most {budgets.MOST_RUNS:,} (gameday's budget for a comparison)" in result.stderr
    assert "12,006,000 runs planned" in result.stderr and not (tmp_path / "map").exists()


def test_two_keys_yaml_reads_as_one_are_said_as_such(tmp_path):
    err = refused(tmp_path, playbook(tmp_path, BODY + "incident:\n  1: one\n  true: yes\n"))
    assert "found duplicate key True" in err and "the keys 1 and true are one key once YAML has read them" in err
