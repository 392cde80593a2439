"""The ``gameday`` command line, in process with click's CliRunner."""
from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.playbook.files import builtin_runbooks, find_playbook
from orchestrator.playbook.template import read_template

CORPUS = Path(__file__).parent / "corpus"
VALID = CORPUS / "valid_minimal.yaml.j2"
VALID_RUNBOOK = CORPUS / "valid_runbook.yaml"
FLAGSHIP = "us-east-1-2021"


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # show the traceback of an unexpected error
    return result


def test_playbooks_list_shows_the_flagship():
    result = invoke("playbooks", "list")
    assert result.exit_code == 0, result.output
    assert FLAGSHIP in result.stdout
    assert "AWS us-east-1, 2021-12-07" in result.stdout


def test_playbooks_show_lists_variables_mitigations_par_and_runbooks():
    result = invoke("playbooks", "show", FLAGSHIP)
    assert result.exit_code == 0, result.output
    out = result.stdout
    header = read_template(find_playbook(FLAGSHIP)).header
    assert len(header) >= 10
    for name, decl in header.items():
        assert f"  {name} = {decl['default']!r}\n" in out, name
        assert decl["description"] in out
    playbook = yaml.safe_load(invoke("playbooks", "render", FLAGSHIP).stdout)
    names = [m["name"] for m in playbook["mitigations"]]
    assert "enable_protection" in names and "deploy_backoff_fix" in names
    mitigations = out.split("\nmitigations:\n", 1)[1]
    for name in names:
        assert f"  {name} " in mitigations, name
    faults = out.split("\nfaults (", 1)[1].split("\npar (", 1)[0]
    for f in playbook["faults"]:
        assert f"  {f['name']} " in faults and f["description"] in faults, f["name"]
    par = out.split("\npar (the historical response):\n", 1)[1]
    assert "loop_broken" in par and "13:34" in par and "backlog_drained" in par and "18:40" in par
    runbooks = builtin_runbooks(FLAGSHIP)
    assert {"none", "historical", "protect-early", "shed-load", "restart-devices"} <= set(runbooks)
    assert "runbooks: " + ", ".join(runbooks) in out


def _bug_flags(rendered: str) -> dict:
    doc = yaml.safe_load(rendered)
    return {p["name"]: p["bugs"]["reconnect_ignores_backoff"] for p in doc["populations"] if "bugs" in p}


def test_playbooks_render_applies_set():
    default = invoke("playbooks", "render", FLAGSHIP)
    assert default.exit_code == 0, default.output
    assert _bug_flags(default.stdout) == {"internal-clients": True, "top-talker": True}
    off = invoke("playbooks", "render", FLAGSHIP, "--set", "latent_bug=false")
    assert off.exit_code == 0, off.output
    assert _bug_flags(off.stdout) == {"internal-clients": False, "top-talker": False}


def test_playbooks_render_applies_a_vars_file(tmp_path):
    vars_file = tmp_path / "vars.yaml"
    vars_file.write_text("bridge_devices: 12\nlatent_bug: false\n")
    result = invoke("playbooks", "render", FLAGSHIP, "--vars", str(vars_file), "--set", "bridge_devices=10")
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.stdout)
    assert doc["devices"][0]["count"] == 10  # --set wins over the vars file
    assert _bug_flags(result.stdout)["internal-clients"] is False


def _commands(group: click.Group, prefix=()):
    yield prefix
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))
        else:
            yield prefix + (name,)


COMMANDS = list(_commands(main))


def test_every_command_is_covered():
    assert {("run",), ("playbooks",), ("playbooks", "list"), ("playbooks", "show"), ("playbooks", "render"),
            ("playbooks", "validate")} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "gameday" for c in COMMANDS])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_of_every_command(command, flag):
    result = invoke(*command, flag)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: ")
    assert " ".join(("main",) + command) in result.stdout.splitlines()[0]


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and "version" in result.stdout


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_run_writes_a_run_directory_and_refuses_to_overwrite_it(tmp_path):
    out = tmp_path / "run"
    args = ["run", str(VALID), "--runbook", str(VALID_RUNBOOK), "--duration", "5m", "--out", str(out), "--json"]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    score = json.loads(first.stdout)  # the score alone; where it went, on stderr
    assert "loop_broken" in score and score["simulated_until"] == "07:05"
    assert f"run directory: {out}" in first.stderr
    for name in ("meta.json", "playbook.yaml", "runbook.yaml", "metrics.csv", "columns.json", "events.jsonl",
                 "score.json", "report/report.md", "report/report.html"):
        assert (out / name).is_file(), name
    assert json.loads((out / "meta.json").read_text())["status"] == "complete"
    assert len((out / "metrics.csv").read_text().splitlines()) == 1 + 5 * 60  # header + one row per 1 s tick
    before = _snapshot(out)

    again = invoke(*args)
    assert again.exit_code == 2
    assert isinstance(again.exception, SystemExit)
    assert again.stdout == ""
    assert again.stderr == f"error: run directory {out} exists and is not empty; choose another --out\n"
    assert _snapshot(out) == before  # the first run is intact


def test_run_into_an_existing_empty_directory_is_fine(tmp_path):
    result = invoke("run", str(VALID), "--runbook", "none", "--duration", "1m", "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "score.json").is_file()


@pytest.mark.slow
def test_the_empty_runbook_none_exists_for_every_playbook(tmp_path):
    result = invoke("run", str(VALID), "--runbook", "none", "--duration", "1m", "--out", str(tmp_path / "run"), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["actions_taken"] == 0
    assert yaml.safe_load((tmp_path / "run" / "runbook.yaml").read_text())["rules"] == []


@pytest.mark.slow
def test_run_prints_a_summary_and_the_run_directory(tmp_path):
    out = tmp_path / "run"
    result = invoke("run", str(VALID), "--runbook", str(VALID_RUNBOOK), "--duration", "2m", "--out", str(out),
                    "--seed", "7")
    assert result.exit_code == 0, result.output
    assert f"run directory: {out}" in result.stdout
    assert json.loads((out / "meta.json").read_text())["seed"] == 7


def test_validate_also_validates_runbooks():
    result = invoke("playbooks", "validate", str(VALID), "--runbook", str(VALID_RUNBOOK), "--runbook", "none")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [f"{VALID_RUNBOOK}: valid", "none: valid"]


def test_validate_the_flagship_and_all_its_runbooks():
    runbooks = builtin_runbooks(FLAGSHIP)
    result = invoke("playbooks", "validate", FLAGSHIP, *[a for r in runbooks for a in ("-r", r)])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 1 + len(runbooks)


@pytest.mark.slow
def test_options_from_the_environment(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", str(VALID), "--runbook", "none", "--duration", "1m", "--out", str(out)],
                                env={"GAMEDAY_RUN_SEED": "5"})
    assert result.exit_code == 0, result.output
    assert json.loads((out / "meta.json").read_text())["seed"] == 5


def test_a_bad_value_from_the_environment_names_its_variable(tmp_path):
    """click names only the option; a value the user never typed needs its source said.
    A bad value typed on the command line, which comes first, is the option's alone."""
    env = {"GAMEDAY_RUN_SEED": "abc", "GAMEDAY_COMPARE_SEEDS": "zz"}
    runs = [CliRunner().invoke(main, args, env=env) for args in (
        ["run", str(VALID), "--duration", "1m", "--out", str(tmp_path / "a")],
        ["compare", str(VALID), "-r", "none"],
        ["run", str(VALID), "--seed", "x", "--duration", "1m", "--out", str(tmp_path / "b")],
        ["run", str(VALID), "--seed=y", "--duration", "1m", "--out", str(tmp_path / "c")])]
    assert [r.exit_code for r in runs] == [2] * 4, [r.output for r in runs]
    assert "'--seed' (from the environment variable GAMEDAY_RUN_SEED): 'abc'" in runs[0].output
    assert "'--seeds' (from the environment variable GAMEDAY_COMPARE_SEEDS): 'zz'" in runs[1].output
    for r, value in zip(runs[2:], "xy"):
        assert f"Invalid value for '--seed': '{value}'" in r.output and "environment" not in r.output
    assert not any((tmp_path / d).exists() for d in "abc")


def test_unknown_playbook_for_show_is_a_clear_error():
    result = invoke("playbooks", "show", "no-such-playbook")
    assert result.exit_code == 2
    assert "no playbook 'no-such-playbook'" in result.stderr and FLAGSHIP in result.stderr


def test_validate_warns_of_retries_without_limit_nobody_chose(tmp_path):
    """retry.max_attempts defaults to 0 (retry until success): said where a perishable
    population leaves it out, not where the playbook writes it, even as 0."""
    text = VALID.read_text()
    assert text.count("    retry: {max_attempts: 3}\n") == 1
    left, chose = tmp_path / "left.yaml.j2", tmp_path / "chose.yaml.j2"
    left.write_text(text.replace("    retry: {max_attempts: 3}\n", ""))
    chose.write_text(text.replace("{max_attempts: 3}", "{max_attempts: 0}"))
    results = [invoke("playbooks", "validate", str(p)) for p in (left, chose, VALID)]
    assert [r.exit_code for r in results] == [0, 0, 0], [r.output for r in results]
    assert ("warning: populations[0].retry.max_attempts is left at its default, 0: clients retries a failed request "
            "until it succeeds") in results[0].stderr
    assert [r.stderr for r in results[1:]] == ["", ""]
    assert "max_attempts" not in invoke("playbooks", "validate", FLAGSHIP).stderr


def test_what_a_run_can_never_reach_is_a_warning_before_it_plays(tmp_path):
    """A trigger or a runbook clock condition at or after the end of the run: said by validate
    (against the playbook's duration) and by run (against its own), and kept in meta.json;
    the run still plays (a short run of a long scenario is a fair check)."""
    late = tmp_path / "late.yaml"
    late.write_text("name: late\nrules:\n  - when: {all: [{alarm: bridge-hot}, {at: \"07:30\"}]}\n    do: add_capacity\n"
                    "  - when: {at: \"07:01\"}\n    do: add_capacity\n")
    result = invoke("playbooks", "validate", str(VALID), "--runbook", str(late))
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"warning: {late}: rules[0].when.all[1].at 07:30 is at or after the end of the run (07:10): it never holds"]
    out = tmp_path / "run"
    result = invoke("run", str(VALID), "--runbook", str(late), "--duration", "30s", "--out", str(out), "--no-report")
    assert result.exit_code == 0, result.output
    expected = ["rules[0].when.all[1].at 07:30 is at or after the end of the run (07:00:30): it never holds",
                "rules[1].when.at 07:01 is at or after the end of the run (07:00:30): it never holds"]
    assert result.stderr.splitlines() == [f"warning: {t}" for t in expected]
    assert json.loads((out / "meta.json").read_text())["never_reached"] == expected
    from orchestrator.playbook.hints import never_reached
    assert never_reached({"triggers": [{"at": 7 * 3600.0}, {"at": 9 * 3600.0}]}, None, 8 * 3600.0) == [
        "triggers[1].at 09:00 is at or after the end of the run (08:00): it never fires"]


def test_a_number_of_seconds_sets_a_duration_variable(tmp_path, monkeypatch):
    """Both outsider trials had --set timeout=5 refused ("same type as the default '3s'"),
    while the format takes a number of seconds as a duration."""
    monkeypatch.chdir(tmp_path)
    assert invoke("playbooks", "new", "mine").exit_code == 0
    result = invoke("playbooks", "render", "mine.yaml.j2", "--set", "timeout=3")
    assert result.exit_code == 0, result.output
    assert "request: {timeout: 3}" in result.stdout
    assert invoke("playbooks", "validate", "mine.yaml.j2", "--set", "timeout=3").exit_code == 0
    refused = invoke("playbooks", "render", "mine.yaml.j2", "--set", "clients=2s")  # (and not the other way round)
    assert refused.exit_code == 2 and "--set clients: got '2s'; expected a value of the same type as the default 2000" \
        in refused.output


def test_a_clock_time_variable_takes_what_yaml_reads_as_a_number(tmp_path):
    """YAML 1.1 reads an unquoted 10:30 as 630 and 10:30:15 as 37815 (09:45 stays text): an
    outsider's --set flush_at=10:30 was refused as "got 630", while 09:45 worked."""
    from reports.timefmt import parse_clock

    assert [parse_clock(v) for v in (450, 630, 37815, "10:30:15")] == [27000.0, 37800.0, 37815.0, 37815.0]
    playbook = tmp_path / "late.yaml.j2"
    playbook.write_text(VALID.read_text().replace("variables:\n", "variables:\n  at: {default: \"07:05\", description: when}\n", 1)
                        + "triggers:\n  - {name: t, at: \"{{ at }}\", effects: []}\n")
    (tmp_path / "vars.yaml").write_text("at: 7:08:30\n")
    for args, said in ((["--set", "at=7:06"], 'at: "07:06"'), (["--set", "at=09:45"], 'at: "09:45"'),
                       (["--vars", str(tmp_path / "vars.yaml")], 'at: "07:08:30"')):
        result = invoke("playbooks", "render", str(playbook), *args)
        assert result.exit_code == 0 and said in result.stdout, (args, result.output)
    refused = invoke("playbooks", "render", str(playbook), "--set", "at=5")  # (not a reading of H:MM)
    assert refused.exit_code == 2 and ("--set at: got 5; expected a clock time, HH:MM or HH:MM:SS, as the default "
                                       "'07:05' is") in refused.output


def test_ctrl_c_while_the_tables_are_written_takes_effect_once_they_are():
    """A real SIGINT inside ``interrupt_deferred`` (what a second Ctrl-C does to a comparison
    writing the tables of the runs its first one saved): the block runs to its end, then
    KeyboardInterrupt; outside it, Ctrl-C is Ctrl-C again."""
    import os
    import signal
    import time

    from orchestrator.runs.directory import interrupt_deferred

    finished = False
    with pytest.raises(KeyboardInterrupt):
        with interrupt_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            finished = True
    assert finished
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # (the handler runs at once; this only waits if it did not)


def test_validate_checks_the_playbooks_own_runbooks_each_one(tmp_path):
    """A playbook's own runbooks (runbooks/PLAYBOOK/ beside it) are validated with it, each
    on its own: one broken does not hide the next, and the exit code says one was. A shared
    runbooks/ folder may hold other playbooks' runbooks: those are left alone."""
    own = tmp_path / "runbooks" / "valid-minimal"
    own.mkdir(parents=True)
    playbook = tmp_path / VALID.name
    playbook.write_text(VALID.read_text())
    for name, source in (("a", "runbook_duplicate_key.yaml"), ("b", "runbook_unknown_metric.yaml"),
                         ("c", "valid_runbook.yaml")):
        (own / f"{name}.yaml").write_text((CORPUS / source).read_text())
    (tmp_path / "runbooks" / "another-playbooks.yaml").write_text((CORPUS / "runbook_unknown_mitigation.yaml").read_text())
    result = invoke("playbooks", "validate", str(playbook))
    assert result.exit_code == 2
    assert result.stdout.splitlines()[1:] == ["c: valid"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {own / 'a.yaml'}: 1 error (parse)", f"error: {own / 'b.yaml'}: 1 error (validate)"]
    (own / "a.yaml").unlink()
    (own / "b.yaml").unlink()
    result = invoke("playbooks", "validate", str(playbook))
    assert result.exit_code == 0 and result.stdout.splitlines()[1:] == ["c: valid"]


def test_an_effect_with_nothing_to_act_on_is_a_warning_before_the_run(tmp_path):
    """flush_cache on a service without a cache does nothing: a template's variant may leave
    the cache out and keep the mitigation, so it is no error, but validate and run say so."""
    text = VALID.read_text().replace("mitigations:\n", "services:\n  - name: api\nmitigations:\n", 1).replace(
        "      - {target: bridge, op: add_devices, args: {count: $devices}}\n",
        "      - {target: bridge, op: add_devices, args: {count: $devices}}\n      - {target: api, op: flush_cache}\n", 1)
    playbook = tmp_path / "idle.yaml.j2"
    playbook.write_text(text)
    warning = "warning: mitigations[0].effects[1]: flush_cache does nothing to api, which has no cache"
    result = invoke("playbooks", "validate", str(playbook))
    assert result.exit_code == 0 and warning in result.stderr.splitlines()
    result = invoke("run", str(playbook), "--runbook", "none", "--duration", "1m", "--hosting", "inprocess",
                    "--no-progress", "--no-report", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0 and warning in result.stderr.splitlines(), result.output
    assert warning[len("warning: "):] in json.loads((tmp_path / "run" / "meta.json").read_text())["never_reached"]
    result = invoke("playbooks", "validate", str(VALID))
    assert "warning" not in result.stderr


def test_a_backlog_queue_that_can_never_wait_past_the_threshold_is_a_warning_before_the_run(tmp_path):
    """An outsider's backlog milestone named a service queue whose limit (20 s of work) was
    under the milestone's threshold (30 s): its wait could never count, and nothing said so."""
    text = VALID.read_text().replace("mitigations:\n", "services:\n  - {name: db, queue: {limit: 20s}}\nmitigations:\n", 1)
    text = text.replace("scoring:\n", "scoring:\n  backlog: {services: [db], threshold: 30}\n", 1)
    playbook = tmp_path / "queue.yaml.j2"
    playbook.write_text(text)
    result = invoke("playbooks", "validate", str(playbook))
    assert result.exit_code == 0 and ("warning: scoring.backlog.services[0] db: its queue holds 20 s of work "
                                      "(queue.limit), so its wait never goes over backlog.threshold (30 s): it never "
                                      "holds the backlog milestone back") in result.stderr.splitlines(), result.output
    playbook.write_text(text.replace("limit: 20s", "limit: 40s"))
    assert "warning" not in invoke("playbooks", "validate", str(playbook)).stderr


def test_a_recovered_service_that_passes_its_work_on_is_a_warning_before_the_run(tmp_path):
    """An outsider's login API (then: session-cache) read 'never impaired' through a
    107-minute outage of every login: its success ratio is its own part's."""
    text = VALID.read_text().replace(
        "mitigations:\n", "services:\n  - {name: api, then: db}\n  - {name: db}\nmitigations:\n", 1)
    playbook = tmp_path / "door.yaml.j2"
    playbook.write_text(text.replace("scoring:\n", "scoring:\n  recovered: {services: [db, api]}\n", 1))
    result = invoke("playbooks", "validate", str(playbook))
    assert result.exit_code == 0 and [line for line in result.stderr.splitlines() if "warning" in line] == [
        "warning: scoring.recovered.services[1] api: it passes its work on to db (then), and its success ratio counts "
        "its own part only, so it can read recovered while its callers' requests fail; scoring.recovered.populations "
        "measures what its callers get"], result.output


def test_validate_warns_of_a_declared_variable_the_template_never_reads(tmp_path):
    """A variable declared in the header and read nowhere: valid, with a warning (an outsider's
    passed silently; only --set of it was refused)."""
    text = VALID.read_text()
    path = tmp_path / "unused.yaml.j2"
    path.write_text(text.replace("variables:\n", "variables:\n  unused:\n    default: 1\n    description: read nowhere\n", 1))
    result = invoke("playbooks", "validate", str(path))
    assert result.exit_code == 0, result.output
    assert ("warning: variables.unused is declared but the template never reads it: setting it changes nothing"
            in result.output)
    assert "never reads" not in invoke("playbooks", "validate", str(VALID)).output


def test_a_fault_a_trigger_injects_is_journalled_as_injected_by_the_trigger(tmp_path):
    """An outsider's trigger injecting a fault was journalled as injected by "facilitator"."""
    playbook = Path(__file__).parent / "playbooks" / "trigger_injects_fault.yaml.j2"
    result = invoke("run", str(playbook), "--runbook", "none", "--out", str(tmp_path / "run"), "--no-report", "--json")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    injected = [e for e in events if e["event"] == "fault_injected"]
    assert [(e["tick"], e["fault"], e["by"]) for e in injected] == [(61, "slow-api", "chaos-monkey")]


@pytest.mark.slow
def test_an_action_says_when_it_was_asked_as_the_runbook_asked_it(tmp_path):
    """action_effective's asked_tick was the tick the deployment tool received the request,
    one after the runbook asked: a report's lead time read a tick short (outsider 5)."""
    playbooks = Path(__file__).parent / "playbooks"
    result = invoke("run", str(playbooks / "mini_loop.yaml.j2"), "--runbook", str(playbooks / "fix_early.yaml"),
                    "--out", str(tmp_path / "run"), "--no-report", "--json")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    asked = {e["id"]: e["tick"] for e in events if e["event"] == "action_requested"}
    effective = [e for e in events if e["event"] == "action_effective"]
    assert effective and all(e["asked_tick"] == asked[e["id"]] for e in effective), (asked, effective)
