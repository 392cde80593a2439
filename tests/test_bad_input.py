"""Bad input gets one clear message naming the location, the value and what was expected,
exit code 2, no traceback, and no run directory.

Every broken file in tests/corpus/ is named after its defect and differs from
valid_minimal.yaml.j2 (playbooks) or valid_runbook.yaml (runbooks) by that one defect
(several_errors.yaml.j2 has five; several_service_errors.yaml.j2 adds services with four). Every case runs ``gameday run`` and ``gameday playbooks
validate`` in process with click's CliRunner; the cases the issue names also run the real
command line in a subprocess (a dozen, at once: each costs about half a second of imports).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.errors import closest_first, nearest

CORPUS = Path(__file__).parent / "corpus"
VALID = CORPUS / "valid_minimal.yaml.j2"
VALID_RUNBOOK = CORPUS / "valid_runbook.yaml"


@dataclass
class Case:
    id: str
    args: list[str]  # after ``gameday run``; --out is added
    expect: list[str]  # substrings of stderr: location, offending value, what was expected
    header: str | None = "1 error"  # the "<source>: N errors (stage)" line; None for click's own usage errors
    validate: list[str] | None = field(default=None)  # after ``gameday playbooks validate``; None: same as run


def playbook(name: str, *expect: str, header="1 error") -> Case:
    path = str(CORPUS / name)
    return Case(name, [path, "--runbook", "none"], [path, *expect], header, [path])


def runbook(name: str, *expect: str, header="1 error") -> Case:
    path = str(CORPUS / name)
    return Case(name, [str(VALID), "--runbook", path], [path, *expect], header, [str(VALID), "--runbook", path])


def variables(id: str, opts: list[str], *expect: str, header="1 error") -> Case:
    return Case(id, [str(VALID), "--runbook", "none", *opts], list(expect), header, [str(VALID), *opts])


SEVERAL_ERRORS = [
    "clock.tick: got 'often'; expected a duration",
    "devices[0].count: got -1; expected an integer >= 0",
    "devices[0].cpu_per_device: got 'fast'; expected a number",
    "populations[0].colour: got 'blue'; expected one of the known fields",
    "populations[0].clients: got 0; expected an integer > 0",
]

CASES = [
    # playbooks: render, parse, validate
    playbook("yaml_syntax_error.yaml.j2", "(parse)", "line 31, column 9", "expected ',' or ']', but got ':'",
             "while parsing a flow sequence at line 30, column 11"),
    playbook("undefined_variable.yaml.j2", "(render)", "line 22:", "'device_cpu_per_second' is undefined",
             "only defined variables (device_cpu, bridge_devices, latent_bug; did you mean device_cpu?)"),
    playbook("unknown_field.yaml.j2", "devices[0].cuont: got 3; expected one of the known fields (count, costs, conntrack"),
    playbook("wrong_type.yaml.j2", "devices[0].cpu_per_device: got 'fast'; expected a number"),
    playbook("negative_capacity.yaml.j2", "devices[0].conntrack.capacity_per_device: got -250000; expected a number > 0"),
    playbook("dunder_class_access.yaml.j2", "(render)", "line 14:", "'__class__'", "unsafe"),
    playbook("dunder_attribute_via_filter.yaml.j2", "(render)", "line 14:", "'__class__'", "unsafe"),
    playbook("unknown_path_device.yaml.j2", "populations[0].path[1]: got 'gateway'; expected a device pool (bridge)"),
    playbook("unknown_mitigation_target.yaml.j2", "mitigations[0].effects[0].target: got 'brige'; expected a part of the world"),
    playbook("unknown_mitigation_op.yaml.j2",
             "mitigations[0].effects[0].op: got 'add_servers'; expected an operation of a device (add_devices, restart"),
    playbook("mitigation_misspelled_argument.yaml.j2",
             "mitigations[0].effects[0].args.cuont: got 'cuont'; expected an argument of add_devices (count)"),
    playbook("mitigation_argument_wrong_type.yaml.j2",
             "mitigations[0].effects[0].args.count: got 'two'; expected a whole number (argument count of add_devices)"),
    playbook("mitigation_missing_argument.yaml.j2",
             "mitigations[0].effects[0].args: got {}; expected argument factor (which scale_rate requires)"),
    playbook("mitigation_argument_out_of_range.yaml.j2",
             "mitigations[0].effects[0].args.factor: got -0.5; expected a number >= 0 (argument factor of scale_rate)"),
    playbook("mitigation_names_unknown_device.yaml.j2", "mitigations[0].effects[0].args.path: got ['brige']; "
             "expected a list naming devices of the playbook (bridge) (argument path of set_path)"),
    playbook("unknown_par_key.yaml.j2", "par.loop_brokn: got 'loop_brokn'; expected a measure of this playbook's runs "
             "(trigger, first_customer_update, demand_restored, loop_broken, devices_healthy) or one of its mitigations (add_capacity)"),
    playbook("tick_longer_than_timeout.yaml.j2", "clock.tick: got 5.0; expected a tick no longer than the shortest "
             "timeout (populations[0].connection.timeout of clients: 3 s)"),
    Case("tick_option_longer_than_timeout", [str(VALID), "--runbook", "none", "--tick", "4s"],  # (validate has no --tick)
         ["--tick: got 4.0; expected a tick no longer than the shortest timeout (populations[0].connection.timeout of "
          "clients: 3 s)"]),
    playbook("no_population.yaml.j2", "populations: got []; expected a list of at least 1 item"),
    playbook("trigger_before_start.yaml.j2", "triggers[0].at: got '06:00'; expected a time at or after clock.start (07:00"),
    playbook("par_before_start.yaml.j2", "par.add_capacity: got '06:50'; expected a time at or after clock.start (07:00"),
    playbook("trigger_refers_to_a_param.yaml.j2", "triggers[0].effects[0].args.count: got '$devices'; expected a value "
             "(a trigger has no params or requester to refer to)"),
    playbook("jinja_syntax_error.yaml.j2", "(render)", "line 21: got \"unexpected '}'\"; expected valid Jinja2 syntax"),
    playbook("template_runtime_error.yaml.j2", "(render)", "line 21:", "ZeroDivisionError", "a template that renders"),
    playbook("missing_required_field.yaml.j2", "devices[0].cpu_per_device: got nothing; expected a value (required"),
    playbook("bad_duration.yaml.j2", "clock.duration: got 'ten minutes'; expected a duration such as 30s"),
    playbook("non_finite_number.yaml.j2", "devices[0].cpu_per_device: got nan; expected a finite number"),
    playbook("bad_variables_header.yaml.j2", "(variables)", "variables.device_cpu:",
             "expected a mapping with 'default' and 'description'"),
    playbook("variables_header_yaml_error.yaml.j2", "(parse of the variables header)", "line 5, column 16",
             "while parsing a flow sequence at line 4, column 14"),
    playbook("duplicate_key.yaml.j2", "(parse)", "line 22, column 5: got \"found duplicate key 'count'\"; expected each "
             "key once in a mapping (it is first at line 21, column 5)"),
    playbook("variables_header_duplicate_key.yaml.j2", "(parse of the variables header)", "line 9, column 3: got "
             "\"found duplicate key 'device_cpu'\"; expected each key once in a mapping (it is first at line 6, column 3)"),
    playbook("several_errors.yaml.j2", "(validate)", *SEVERAL_ERRORS, header="5 errors"),
    playbook("field_and_reference_errors.yaml.j2", "(validate)", "devices[0].count: got -1; expected an integer >= 0",
             "mitigations[0].effects[0].op: got 'add_servers'; expected an operation of a device (add_devices, restart",
             header="2 errors"),
    playbook("yaml_boolean_surprise.yaml.j2", "populations[0].retry.jitter: got False; expected one of none, full, "
             "equal, decorrelated (YAML reads an unquoted yes/no/on/off/true/false as a boolean: quote it)"),
    playbook("alarm_threshold_as_percentage.yaml.j2",  # (one error: none follows on the alarm for its missing bound)
             "monitoring.alarms[0].above: got '90%'; expected a number (a share is a number from 0 to 1: 0.2 for 20%)"),
    playbook("observed_metric_misspelt.yaml.j2", "monitoring.observe[1]: got 'clients.eror_ratio'; expected "
             "agent.metric naming a part of this world and one of its metrics (clients.error_ratio, ",
             "did you mean clients.error_ratio?)"),
    playbook("scoring_device_misspelt.yaml.j2", "scoring.loop.devices[0]: got 'brige'; expected a device pool (bridge)"),
    playbook("population_mode_misspelt.yaml.j2", "populations[0].mode: got 'per-request'; expected one of pooled, "
             "per_request; did you mean per_request?"),
    playbook("negative_duration.yaml.j2", "monitoring.alarms[0].for: got '-2m'; expected a duration of at least 0, "
             "such as 30s"),
    playbook("alarm_metric_not_observed.yaml.j2", "monitoring.alarms[0].metric: got 'bridge.utilisaton'; expected a "
             "metric listed in monitoring.observe (bridge.utilisation, clients.error_ratio; did you mean "
             "bridge.utilisation?)"),
    playbook("mitigation_param_reference_misspelt.yaml.j2", "mitigations[0].effects[0].args.count: got '$device'; "
             "expected $requester or $name of one of the mitigation's params ($devices, $requester; did you mean "
             "$devices?)"),
    playbook("stale_after_within_a_report_period.yaml.j2", "monitoring.stale_after: got 60.0; expected a duration "
             "longer than monitoring.telemetry_every plus monitoring.timeout (65 s)"),
    playbook("amplification_below_one.yaml.j2", "scoring.loop.amplification_max: got 0.5; expected a number >= 1"),
    playbook("mitigation_argument_yaml_boolean.yaml.j2", "mitigations[0].effects[1].args.jitter: got False; expected a "
             "string (YAML reads an unquoted yes/no/on/off/true/false as a boolean: quote it) (argument jitter of "
             "set_retry_policy)"),
    playbook("yaml_colon_in_value.yaml.j2", "(parse)", "got 'mapping values are not allowed here'; expected valid YAML "
             "(a ': ' inside an unquoted value starts a mapping: quote the value)"),
    playbook("yaml_exponent_as_text.yaml.j2", "devices[0].conntrack.capacity_per_device: got '2.5e5'; expected a "
             "number (YAML 1.1 reads 2.5e5 as text: its numbers with an exponent need a dot and a sign"),
    playbook("several_service_errors.yaml.j2", "(validate)",
             "services[1].leases.ttl: got 90.0; expected a whole number of renewal periods (60 s)",
             "services[3].health_checks.network: got 'store'; expected a service with a queue",
             "services[1].then: got 'launcher'; expected a chain of services that does not lead back to this one "
             "(manager -> launcher -> manager)", header="3 errors"),  # (a cycle said once)
    playbook("cache_errors.yaml.j2", "(validate)",
             "services[0].cache.store: got 'stor'; expected another service",
             "services[1].cache.size: got 2000; expected at most cache.keys (1000)",
             "services[1].then: got 'front'; expected no then on a cache",
             "services[2].cache.store: got 'far'; expected a chain of services that does not lead back to this one "
             "(near -> far -> near)", header="4 errors"),
    # a duplicate name: what refers to it is not wrong whichever part it meant, so it is not said
    playbook("population_named_like_device.yaml.j2", "(validate)",
             "populations[0].name: got 'bridge'; expected a name used by no other part of the world",
             "monitoring.observe[1]: got 'clients.error_ratio'", "scoring.loop.populations[0]: got 'clients'",
             header="3 errors"),
    playbook("set_work_without_dispatch_rate.yaml.j2", "mitigations[0].effects[0].args: got {'work': 'durable'}; "
             "expected max_rate (population clients has none, and durable work needs a dispatch rate)"),
    playbook("population_target_misspelt.yaml.j2",
             "populations[0].target: got 'paymnts'; expected a service (payments, payments-db; did you mean payments?)"),
    playbook("variable_default_out_of_range.yaml.j2", "devices[0].cpu_per_device: got -10000; expected a number > 0 "
             "(the default of variable device_cpu, in the file's variables header)"),
    playbook("variable_default_misspelt.yaml.j2", "(variables)", "variables.bridge_devices: got {'defualt': 2, ",
             "expected a mapping with 'default' and 'description' (did you mean default for defualt?)"),
    playbook("hint_errors.yaml.j2", "(validate)",
             "hints[1].text: got 'xxxx", "expected a text of 1 to 500 characters (what a console shows)",
             "hints[1].name: got 'look_at_the_bridge'; expected a name used by no other of the hints", header="2 errors"),
    # runbooks, against the valid playbook
    runbook("runbook_do_key_misspelt.yaml",
            "rules[0].do.parms: got {'devices': 4}; expected only action and params (did you mean params?)"),
    runbook("runbook_unknown_mitigation.yaml",
            "rules[0].do.action: got 'reboot_everything'; expected a mitigation of valid-minimal (add_capacity)"),
    runbook("runbook_do_list_unknown_action.yaml",  # (a rule may ask for several actions: each is checked)
            "rules[0].do[1].action: got 'reboot_everything'; expected a mitigation of valid-minimal (add_capacity)"),
    runbook("runbook_do_list_empty.yaml", "rules[0].do: got []; expected at least one action"),
    runbook("runbook_unknown_metric.yaml",  # the observed metrics, the most alike first
            "rules[1].when.metric: got 'clients.latency_p99'; expected a metric the playbook's monitoring observes "
            "(clients.error_ratio, bridge.utilisation)"),
    runbook("runbook_field_error_and_unknown_action.yaml", "rules[0].repeat: got 'sometimes'; expected true or false",
            "rules[0].do.action: got 'add_capacty'; expected a mitigation of valid-minimal (add_capacity)", header="2 errors"),
    runbook("runbook_bad_condition.yaml", "rules[1].when: got {'metric': 'clients.error_ratio', 'above': 0.1, 'below': 0.5",
            "expected exactly one of above, below"),
    runbook("runbook_yaml_syntax_error.yaml", "(parse)", "line 7, column 7", "expected ',' or '}', but got ':'",
            "while parsing a flow mapping at line 6, column 11"),
    runbook("runbook_duplicate_key.yaml", "(parse)", "line 8, column 5: got \"found duplicate key 'do'\"; expected "
            "each key once in a mapping (it is first at line 7, column 5)"),
    runbook("runbook_at_before_start.yaml", "rules[0].when.at: got '06:45'; expected a time at or after clock.start "
            "(07:00; a time the next day is 24:00 or later)"),
    runbook("runbook_relative_time_not_a_duration.yaml", "rules[0].when.at: got '+30 min'; expected + and a duration "
            "after the first trigger, such as +15m or +90s"),
    runbook("runbook_param_wrong_type.yaml",
            "rules[1].do.params.devices: got 'four'; expected a whole number (it is argument count of add_devices)"),
    runbook("runbook_unknown_param.yaml", "rules[1].do.params.servers: got 4; expected a parameter of add_capacity (devices)"),
    runbook("runbook_wrong_type.yaml", "rules[1].when.for: got 'a while'; expected a duration",
            "rules[1].when.above: got 'high'; expected a number", header="2 errors"),
    runbook("runbook_unknown_rule_field.yaml", "rules[0].wehn: got {'alarm': 'bridge-hot'}; expected one of the known fields",
            "rules[0].when: got nothing; expected a value (required", header="2 errors"),
    Case("runbook_not_found", [str(VALID), "--runbook", "nope"],
         ["no runbook 'nope': not a file, and the runbooks of valid-minimal are: none",
          f"(a playbook's own runbooks go in {CORPUS / 'runbooks' / 'valid-minimal'}/)"], None,
         [str(VALID), "--runbook", "nope"]),
    # variables: --set and --vars
    variables("set_unknown_variable", ["--set", "nope=1"],
              "--set nope: got 1; expected one of the playbook's variables (latent_bug, device_cpu, bridge_devices)"),
    variables("set_wrong_type", ["--set", "bridge_devices=many"],
              "--set bridge_devices: got 'many'; expected a value of the same type as the default 2"),
    variables("set_wrong_type_bool", ["--set", "latent_bug=3"],
              "--set latent_bug: got 3; expected true or false (the default is true)"),
    variables("set_without_equals", ["--set", "bridge_devices"], "--set: got 'bridge_devices'; expected name=value"),
    variables("set_negative_capacity", ["--set", "device_cpu=-5"],
              "devices[0].cpu_per_device: got -5; expected a number > 0 (variable device_cpu was set to -5 for this run)"),
    variables("set_fraction_for_a_count", ["--set", "bridge_devices=2.5"],  # (a number, as the default: a field objects)
              "devices[0].count: got 2.5; expected an integer (variable bridge_devices was set to 2.5 for this run)"),
    variables("vars_wrong_type", ["--vars", str(CORPUS / "vars_wrong_type.yaml")],
              f"bridge_devices (--vars {CORPUS / 'vars_wrong_type.yaml'}): got 'many'; expected a value of the same type"),
    variables("vars_unknown_variable", ["--vars", str(CORPUS / "vars_unknown_variable.yaml")],
              f"bridge_count (--vars {CORPUS / 'vars_unknown_variable.yaml'}): got 3; expected one of the playbook's variables"),
    variables("vars_yaml_syntax_error", ["--vars", str(CORPUS / "vars_yaml_syntax_error.yaml")],
              str(CORPUS / "vars_yaml_syntax_error.yaml"), "(vars file)", "expected valid YAML"),
    variables("vars_duplicate_key", ["--vars", str(CORPUS / "vars_duplicate_key.yaml")], "(vars file)",
              "line 3, column 1: got \"found duplicate key 'bridge_devices'\"; expected each key once in a mapping"),
    variables("vars_not_a_mapping", ["--vars", str(CORPUS / "vars_not_a_mapping.yaml")],
              "document: got ['bridge_devices', 3]; expected a mapping of variable -> value"),
    variables("vars_missing_file", ["--vars", str(CORPUS / "no_such_vars.yaml")],
              "file: got", "no_such_vars.yaml", "expected a readable file"),
    # options (click reports these itself, also with exit code 2)
    Case("duration_not_a_duration", [str(VALID), "--runbook", "none", "--duration", "soon"],
         ["Invalid value for '--duration': 'soon' is not a duration"], None),
    Case("duration_infinite", [str(VALID), "--runbook", "none", "--duration", "inf"],
         ["Invalid value for '--duration': 'inf' is not a duration"], None),
    Case("tick_nan", [str(VALID), "--runbook", "none", "--tick", "nan"],
         ["Invalid value for '--tick': 'nan' is not a duration"], None),
    Case("duration_zero", [str(VALID), "--runbook", "none", "--duration", "0"],
         ["--duration: got 0.0; expected a duration > 0"]),
    Case("negative_seed", [str(VALID), "--runbook", "none", "--seed", "-1"],
         ["Invalid value for '--seed': -1 is not in the range x>=0"], None),
    Case("playbook_not_found", [str(CORPUS / "no_such_playbook.yaml.j2")],
         ["no playbook", "no_such_playbook.yaml.j2", "built-in playbooks are: us-east-1-2015, us-east-1-2021"], None),
]
PLAYBOOK_FILES = {c.id for c in CASES if c.id.endswith(".yaml.j2")}
#: run in a real subprocess as well: the defects the issue lists, and one of each other kind
#: the cases played through the real command line too, as a process (its exit code, its streams):
#: one of each kind of input and stage, the messages themselves being checked in process for every
#: case (test_run_reports_bad_input_clearly_and_creates_no_run_directory)
REAL = ["yaml_syntax_error.yaml.j2", "several_errors.yaml.j2", "dunder_class_access.yaml.j2",
        "runbook_unknown_mitigation.yaml", "vars_wrong_type", "negative_seed"]
REAL_CASES = [c for c in CASES if c.id in REAL]


def test_a_misspelt_name_is_guessed_and_a_name_like_none_of_the_known_is_not():
    ops = ["restart", "add_devices", "throttle"]
    guess = closest_first("add_servers", ops)
    assert guess.startswith("add_devices, ") and guess.endswith("; did you mean add_devices?")
    assert closest_first("cuont", ["count"]) == "count"  # (the one name is the guess)
    assert sorted(closest_first("xyz", ops).split(", ")) == sorted(ops)  # no guess, every name
    assert nearest("add_devices", ops) is None  # (a known name is not a misspelling of itself)
    # a name cut short to whole words of it is guessed before one with letters in common:
    # shed is shed_load, not unshed (its opposite, which an outsider was offered)
    assert closest_first("shed", ["unshed", "shed_load", "restart"]).endswith("; did you mean shed_load?")
    assert closest_first("shed", ["unshed", "shed-load", "shed.traffic"]).endswith("did you mean shed-load or shed.traffic?")
    assert nearest("device", ["devices", "device_restart"]) == "devices"  # (a letter off comes first)
    assert nearest("unshed", ["shed_load", "restart"]) is None
    assert nearest("restart", ["restart", "restart_pool"]) is None  # (a known name is no other's short form)


def test_every_broken_file_in_the_corpus_has_a_case():
    files = {p.name for p in CORPUS.iterdir()} - {VALID.name, VALID_RUNBOOK.name}
    covered = {c.id for c in CASES} | {Path(a).name for c in CASES for a in c.args}
    assert files <= covered, f"corpus files without a case: {sorted(files - covered)}"


def test_each_broken_playbook_differs_from_the_valid_one_by_one_defect():
    import difflib

    base = VALID.read_text().splitlines()[1:]  # line 1 is the comment naming the defect
    # (no_population.yaml.j2 takes the population out, with what names it)
    for name in sorted(PLAYBOOK_FILES - {"several_errors.yaml.j2", "several_service_errors.yaml.j2",
                                         "cache_errors.yaml.j2", "field_and_reference_errors.yaml.j2",
                                         "no_population.yaml.j2"}):
        broken = (CORPUS / name).read_text().splitlines()[1:]
        changed = [ln for ln in difflib.unified_diff(base, broken, lineterm="", n=0)
                   if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        assert 1 <= len(changed) <= 3, (name, changed)  # one edit: a line changed, added or removed


# -- the real command line, in subprocesses ------------------------------------------------

def _gameday(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """Every case's ``gameday run`` at once: case id -> (result, its working directory, its --out)."""
    # the directories are made here, not in the threads: tmp_path_factory is not thread-safe
    cwds = {case.id: tmp_path_factory.mktemp("case") for case in REAL_CASES}

    def one(case: Case):
        cwd = cwds[case.id]
        out = cwd / "run"
        return case.id, (_gameday(["run", *case.args, "--out", str(out), "--no-progress"], cwd), cwd, out)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, REAL_CASES))


def _assert_clear_error(exit_code: int, stdout: str, stderr: str, case: Case, stdout_ok: str = "") -> None:
    assert exit_code == 2, (exit_code, stdout, stderr)
    assert "Traceback" not in stdout + stderr, stderr
    assert stdout == stdout_ok, stdout  # nothing but the message, and that on stderr
    for text in case.expect:
        assert text in stderr, f"{text!r} not in:\n{stderr}"
    if case.header is not None:
        # exactly one message: one "error:" line with its count, then the issues, one per line
        assert stderr.startswith("error: ") and stderr.count("error: ") == 1, stderr
        first = stderr.splitlines()[0]
        assert f": {case.header} (" in first, first
        n = int(case.header.split()[0])
        assert len(stderr.strip().splitlines()) == 1 + n, stderr


@pytest.mark.slow  # (every case a process of its own: several seconds in all)
@pytest.mark.parametrize("case", REAL_CASES, ids=[c.id for c in REAL_CASES])
def test_real_command_line_reports_bad_input_clearly_and_creates_no_run_directory(case, cli_runs):
    result, cwd, out = cli_runs[case.id]
    _assert_clear_error(result.returncode, result.stdout, result.stderr, case)
    assert not out.exists()
    assert list(cwd.iterdir()) == []  # nor anything else (no default runs/ directory)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_run_reports_bad_input_clearly_and_creates_no_run_directory(case, tmp_path):
    runner = CliRunner()
    with runner.isolated_filesystem(temp_dir=tmp_path) as cwd:
        result = runner.invoke(main, ["run", *case.args, "--out", "run", "--no-progress"])
        assert isinstance(result.exception, SystemExit), result.exc_info  # not an uncaught exception
        _assert_clear_error(result.exit_code, result.stdout, result.stderr, case)
        assert list(Path(cwd).iterdir()) == []  # no run directory, nor a default runs/ one


def test_several_errors_are_reported_together_in_one_message(cli_runs):
    result, _, _ = cli_runs["several_errors.yaml.j2"]
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"error: {CORPUS / 'several_errors.yaml.j2'}: 5 errors (validate)"
    for expected, line in zip(SEVERAL_ERRORS, lines[1:]):
        assert line.strip().startswith(expected), (expected, line)


def test_a_runbooks_errors_come_rule_by_rule_as_the_file_reads(tmp_path):
    """A rule's field errors (a name that is not a text) used to come before every
    reference error (a misspelt metric of the rule before it)."""
    from orchestrator.errors import InvalidRunbook
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.playbook.runbooks import load_runbook

    book = tmp_path / "rules.yaml"
    book.write_text("name: rules\nrules:\n"
                    "  - {when: {metric: clients.eror_ratio, above: 0.5}, do: add_capacity}\n"
                    "  - {name: [a, list], when: {metric: clients.error_ratio, above: 0.5}, do: add_capacty}\n")
    with pytest.raises(InvalidRunbook) as e:
        load_runbook(str(book), load_playbook(str(VALID)))
    assert [i.location for i in e.value.issues] == ["rules[0].when.metric", "rules[1].name", "rules[1].do.action"]


@pytest.mark.slow
def test_the_valid_files_run_through_the_real_command_line(tmp_path):
    out = tmp_path / "run"
    result = _gameday(["run", str(VALID), "--runbook", str(VALID_RUNBOOK), "--duration", "2m", "--out", str(out),
                       "--json", "--no-progress"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (out / "score.json").is_file()


# -- in process, through `gameday playbooks validate` ---------------------------------------

def test_validate_accepts_the_valid_minimal_playbook_and_runbook():
    result = CliRunner().invoke(main, ["playbooks", "validate", str(VALID), "--runbook", str(VALID_RUNBOOK)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.stdout and result.stderr == ""


VALIDATE_CASES = [c for c in CASES if c.validate is not None]


@pytest.mark.parametrize("case", VALIDATE_CASES, ids=[c.id for c in VALIDATE_CASES])
def test_validate_rejects_each_broken_input(case):
    result = CliRunner().invoke(main, ["playbooks", "validate", *case.validate])
    assert isinstance(result.exception, SystemExit), result.exc_info  # not an uncaught exception
    # with --runbook, validate first says the playbook itself is valid
    ok = f"{VALID}: valid (1 population, 1 device pool, 1 mitigation)\n" if "--runbook" in case.validate else ""
    _assert_clear_error(result.exit_code, result.stdout, result.stderr, case, stdout_ok=ok)


@pytest.mark.parametrize("content", [b"name: caf\xe9\n", b"\xff\xfe\x00n\x00"], ids=["latin1", "utf16"])
def test_files_that_are_not_utf8_are_reported_not_raised(tmp_path, content):
    bad = tmp_path / "not_utf8.yaml.j2"
    bad.write_bytes(content)
    rb = tmp_path / "not_utf8_runbook.yaml"
    rb.write_bytes(content)
    for args, source in ((["playbooks", "validate", str(bad)], bad),
                         (["run", str(VALID), "--runbook", str(rb), "--out", str(tmp_path / "run")], rb)):
        result = CliRunner().invoke(main, args)
        assert isinstance(result.exception, SystemExit), result.exc_info
        assert result.exit_code == 2
        assert f"error: {source}: 1 error (read)" in result.stderr
        assert "expected UTF-8 text" in result.stderr
    assert not (tmp_path / "run").exists()


def test_setting_a_variable_the_template_never_uses_is_refused(tmp_path):
    """A declared variable that no {{ }} reads: --set of it (or a sweep over it) would change
    nothing, silently; it is refused, in run, validate and compare alike."""
    from orchestrator.batch.comparison import compare
    from orchestrator.errors import InvalidInput

    text = VALID.read_text().replace("variables:\n", "variables:\n  surge:\n    default: 5000\n"
                                     "    description: extra setups per second (never used below)\n", 1)
    path = tmp_path / "unused.yaml.j2"
    path.write_text(text)
    expect = ("--set surge: got 6000; expected a variable the template uses: surge is declared, but {{ surge }} "
              "appears nowhere in the template, so setting it would change nothing")
    case = Case("set_unused_variable", [str(path), "--runbook", "none", "--set", "surge=6000"], [expect])
    runner = CliRunner()
    with runner.isolated_filesystem(temp_dir=tmp_path) as cwd:
        for args in (["run", *case.args, "--out", "run", "--no-progress"], ["playbooks", "validate", str(path), "--set", "surge=6000"]):
            result = runner.invoke(main, args)
            assert isinstance(result.exception, SystemExit), result.exc_info
            _assert_clear_error(result.exit_code, result.stdout, result.stderr, case)
        assert list(Path(cwd).iterdir()) == []
    # (the Python API names its keyword, sweep['surge']; the command line its flag, --sweep surge)
    with pytest.raises(InvalidInput, match=r"sweep\['surge'\]: got 1; expected a variable the template uses"):
        compare(str(path), ["none"], 1, sweeps={"surge": [1, 2]}, parallel=False)
    assert runner.invoke(main, ["playbooks", "validate", str(path)]).exit_code == 0  # declaring it alone is no mistake


@pytest.mark.slow
def test_a_ray_address_where_nothing_answers_is_a_clear_error_at_once(tmp_path):
    """--address of a cluster that is not there: ray.init would retry it for minutes (a port
    that refuses) or stop with a bare traceback; gameday names the option and the reason,
    exits 2 and writes nothing. Both the run and the comparison (Ray tasks) check it."""
    with socket.socket() as s:  # a port nobody listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "GAMEDAY_RUN_HOSTING")}
    root = Path(__file__).resolve().parents[1]
    cases = [(["run", str(VALID), "--runbook", "none", "--no-progress", "--out", str(tmp_path / "run"),
               "--address", f"127.0.0.1:{port}"], f"got '127.0.0.1:{port}'; expected the address of a running Ray "
              "cluster's head (nothing answered there within 5 s: Connection refused)"),
             (["compare", str(VALID), "-r", "none", "--seeds", "2", "--address", "head-node"],
              "got 'head-node'; expected auto, local, HOST:PORT")]
    for args, expected in cases:
        out = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                             timeout=120, env=env, cwd=tmp_path)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
        assert out.stderr.startswith("error: gameday: 1 error (options)\n  --address (or RAY_ADDRESS): "), out.stderr
        assert expected in out.stderr
    assert not (tmp_path / "run").exists()


def test_the_python_api_names_its_keywords_and_where_each_value_came_from(tmp_path):
    """Through ``orchestrator.run`` a vars file's value is said as the file's (it was said as
    ``--set NAME``), a ``sets`` entry and an option by their keywords, never a flag; nothing
    is written."""
    import orchestrator
    from orchestrator.errors import InvalidInput

    cases = {"vars_file": (dict(vars_file=str(CORPUS / "vars_wrong_type.yaml")),
                           f"bridge_devices (vars_file {CORPUS / 'vars_wrong_type.yaml'}): got 'many'"),
             "sets": (dict(sets={"nope": 1}), "sets['nope']: got 1; expected one of the playbook's variables"),
             "sets over the file": (dict(vars_file=str(CORPUS / "vars_wrong_type.yaml"), sets={"bridge_devices": "x"}),
                                    "sets['bridge_devices']: got 'x'"),
             "tick": (dict(tick=0), "tick: got 0.0; expected a duration from 1e-06 to 60 s"),
             "shards": (dict(shards=0), "shards: got 0; expected an integer >= 1")}
    for what, (kwargs, said) in cases.items():
        out = tmp_path / what
        with pytest.raises(InvalidInput) as e:
            orchestrator.run(str(VALID), runbook="none", out=out, **kwargs)
        assert said in str(e.value) and "--" not in str(e.value), (what, str(e.value))
        assert not out.exists()


def test_gameday_run_resolves_the_variables_once(tmp_path, monkeypatch):
    """The command line hands --set and --vars to the run as given, with where each was
    said; the playbook resolves them when it loads, once (they were resolved, checked and
    thrown away first)."""
    from orchestrator.playbook import loader

    calls = []
    resolve = loader.resolve_variables
    monkeypatch.setattr(loader, "resolve_variables", lambda *a, **k: calls.append(a) or resolve(*a, **k))
    result = CliRunner().invoke(main, ["run", str(VALID), "--runbook", "none", "--set", "bridge_devices=3",
                                       "--duration", "5m", "--hosting", "inprocess", "--no-attribution", "--no-report",
                                       "--no-progress", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1 and calls[0][1].values == {"bridge_devices": 3}
    assert calls[0][1].where("bridge_devices") == "--set bridge_devices"  # (as the command line says it)


def test_validate_checks_a_tick_and_a_duration_as_run_does():
    """`playbooks validate` took no --tick or --duration, so a tick too coarse for the
    playbook's timeouts was found only by `run`: both say it now, in the same words, and a
    duration that ends the run early warns of what it never reaches."""
    runner = CliRunner()
    for tick in ("5s", "90s"):
        validated = runner.invoke(main, ["playbooks", "validate", "us-east-1-2021", "--tick", tick])
        ran = runner.invoke(main, ["run", "us-east-1-2021", "--tick", tick, "--hosting", "inprocess", "--out", "x"])
        said = [line for line in validated.stderr.splitlines() if line.startswith("  --tick")]
        assert validated.exit_code == ran.exit_code == 2 and said, validated.output
        assert said == [line for line in ran.stderr.splitlines() if line.startswith("  --tick")]
    short = runner.invoke(main, ["playbooks", "validate", "us-east-1-2021", "--duration", "2h"])
    assert short.exit_code == 0 and "is at or after the end of the run (09:00): it never holds" in short.stderr
    assert "at or after the end of the run" not in runner.invoke(main, ["playbooks", "validate", "us-east-1-2021"]).stderr
