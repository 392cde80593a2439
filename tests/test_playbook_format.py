"""The playbook format has one description, and everything is generated from it: the
reference (docs/reference/playbook.md), the JSON Schema editors use, and validation.

- the reference in the repository is the generated one, and names every field, operation,
  argument, metric and condition validation accepts, each with a meaning;
- the JSON Schemas are valid draft 2020-12 schemas, accept every built-in playbook and
  runbook, and reject every file of the bad-input corpus whose defect one field can show;
- a user's playbook finds the runbooks beside it, and ``gameday playbooks new`` writes one
  that validates and runs.
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from agents import AGENT_CLASSES
from orchestrator.cli import main
from orchestrator.playbook.format import CONDITIONS, PLAYBOOK, RUNBOOK
from orchestrator.playbook.reference import reference_markdown, undocumented, walk_fields
from orchestrator.playbook.json_schema import playbook_schema, runbook_schema
from orchestrator.playbook.operations import TARGET_KINDS, operations
from orchestrator.playbook.files import builtin_dir, builtin_playbooks, builtin_runbooks, find_playbook
from orchestrator.playbook.loader import load_playbook
from orchestrator.playbook.runbooks import load_runbook
from orchestrator.playbook.yaml_text import load_yaml
from orchestrator.playbook.template import read_template, render
from orchestrator.playbook.variables import resolve_variables

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference" / "playbook.md"
CORPUS = Path(__file__).parent / "corpus"

#: corpus files whose defect needs more than one field to see (names that must exist
#: elsewhere in the world, a chain of services) or that never becomes YAML: only
#: ``gameday playbooks validate`` catches these
NOT_FOR_A_SCHEMA = {
    "scoring_device_misspelt.yaml.j2": "the device pool must be defined elsewhere in the file",
    "stale_after_within_a_report_period.yaml.j2": "stale_after against telemetry_every and timeout",
    "mitigation_param_reference_misspelt.yaml.j2": "the param must be declared by the same mitigation",
    "alarm_metric_not_observed.yaml.j2": "the metric must be listed in monitoring.observe",
    "unknown_mitigation_target.yaml.j2": "the target must be a part defined elsewhere in the file",
    "unknown_path_device.yaml.j2": "the device must be defined elsewhere in the file",
    "population_target_misspelt.yaml.j2": "the service must be defined elsewhere in the file",
    "population_named_like_device.yaml.j2": "names unique across the sections of the file",
    "several_service_errors.yaml.j2": "lease periods, queues and chains across services",
    "set_work_without_dispatch_rate.yaml.j2": "the population's max_rate is elsewhere in the file",
    "cache_errors.yaml.j2": "a cache's store defined elsewhere, its size against its keys, chains across services",
    "hint_errors.yaml.j2": "names unique among the hints, and a hint's text within what a console shows (500 "
                           "characters: the schema's texts may be longer)",
    "non_finite_number.yaml.j2": "YAML's .nan is a number to JSON Schema, and NaN passes every range",
    "runbook_unknown_metric.yaml": "the metric must be observed by the playbook",
    "runbook_unknown_mitigation.yaml": "the action must be a mitigation of the playbook",
    "runbook_do_list_unknown_action.yaml": "the action must be a mitigation of the playbook",
    "runbook_unknown_param.yaml": "the param must be declared by the playbook's mitigation",
    "runbook_param_wrong_type.yaml": "the param's type is that of the operation the playbook's mitigation applies",
    "mitigation_names_unknown_device.yaml.j2": "the device must be defined elsewhere in the file",
    "unknown_par_key.yaml.j2": "the measures and mitigations are those of the file",
    "trigger_before_start.yaml.j2": "two fields compared",
    "par_before_start.yaml.j2": "two fields compared",
    "observed_metric_misspelt.yaml.j2": "the metrics are those of the parts the file defines",
    "runbook_at_before_start.yaml": "a time compared with the playbook's clock.start",
    "tick_longer_than_timeout.yaml.j2": "the tick compared with every population's timeouts",
    "runbook_field_error_and_unknown_action.yaml": None,  # its field error is one a schema sees
}


def test_the_reference_in_the_repository_is_the_generated_one():
    assert REFERENCE.read_text(encoding="utf-8") == reference_markdown(), \
        "docs/reference/playbook.md is stale: gameday playbooks reference > docs/reference/playbook.md"


def test_every_entry_of_the_format_has_a_meaning_and_an_example():
    assert undocumented() == []


def test_the_reference_names_everything_validation_accepts():
    text = reference_markdown()
    for root in (PLAYBOOK, RUNBOOK):
        for loc, _, _ in walk_fields(root):
            assert f"`{loc}`" in text, loc
    for key, cond in CONDITIONS.items():
        assert f"### `{key}`" in text
        for k in cond.keys:
            assert f"**`{k}`**" in text
    for kind in TARGET_KINDS:
        for name, op in operations(kind).items():
            assert f"#### `{name}`" in text
            for arg in op.args:
                assert f"**`{arg}`**" in text, (kind, name, arg)
        for metric, (_, meaning) in AGENT_CLASSES[kind].METRICS.items():
            assert f"| `{metric}` |" in text and meaning


def test_the_reference_command_prints_the_reference():
    result = CliRunner().invoke(main, ["playbooks", "reference"])
    assert result.exit_code == 0
    assert result.output == reference_markdown()


def test_every_operation_example_is_a_valid_effect():
    """Each operation's example arguments pass the argument checks of validation."""
    for kind in TARGET_KINDS:
        for name, op in operations(kind).items():
            for k, v in op.example.items():
                assert k in op.args, (kind, name, k)
                assert op.args[k].problem(v) is None, (kind, name, k, v)
            missing = [k for k, a in op.args.items() if a.required and k not in op.example]
            assert not missing, (kind, name, missing)


# -- JSON Schema ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def validators():
    schemas = playbook_schema(), runbook_schema()
    for s in schemas:
        jsonschema.Draft202012Validator.check_schema(s)
    return tuple(jsonschema.Draft202012Validator(s) for s in schemas)


def _rendered(path: Path) -> dict:
    tpl = read_template(path)
    return load_yaml(render(tpl, resolve_variables(tpl, {}, str(path))))


def test_the_built_in_playbooks_and_runbooks_satisfy_the_schemas(validators):
    pb, rb = validators
    for name in builtin_playbooks():
        doc = _rendered(find_playbook(name))
        assert [e.message for e in pb.iter_errors(doc)] == [], name
        for r in builtin_runbooks(name):
            runbook = load_yaml((builtin_dir() / "runbooks" / name / f"{r}.yaml").read_text())
            assert [e.message for e in rb.iter_errors(runbook)] == [], (name, r)
    starter = _rendered(builtin_dir() / "templates" / "starter.yaml.j2")
    assert [e.message for e in pb.iter_errors(starter)] == []


def _corpus_documents():
    """(file name, parsed document, is a runbook) of every corpus file that parses."""
    for f in sorted(CORPUS.iterdir()):
        try:
            if f.name.endswith(".yaml.j2"):
                yield f.name, _rendered(f), False
            elif f.name.startswith(("runbook", "valid_runbook")):
                yield f.name, load_yaml(f.read_text()), True
        except Exception:  # a render or YAML error: never a document for a schema to judge
            continue


@pytest.mark.slow
def test_the_schemas_reject_every_corpus_defect_a_field_shows(validators):
    pb, rb = validators
    judged = list(_corpus_documents())
    assert len(judged) > 20
    for name, doc, is_runbook in judged:
        errors = list((rb if is_runbook else pb).iter_errors(doc))
        if name.startswith("valid_"):
            assert errors == [], name
        elif NOT_FOR_A_SCHEMA.get(name):
            continue
        else:
            assert errors, f"{name}: the schema accepts it"


def test_the_schema_checks_an_operations_arguments(validators):
    pb, _ = validators
    doc = _rendered(CORPUS / "valid_minimal.yaml.j2")
    effect = doc["mitigations"][0]["effects"][0]
    assert not list(pb.iter_errors(doc))
    for args in ({"cuont": 2}, {"count": "two"}):
        effect["args"] = args
        assert list(pb.iter_errors(doc)), args
    effect["args"] = {"count": "$devices"}  # a param reference
    assert not list(pb.iter_errors(doc))
    effect.update(target="clients", op="scale_rate", args={})  # factor is required
    assert list(pb.iter_errors(doc))
    effect["args"] = {"factor": 0.5}
    assert not list(pb.iter_errors(doc))


def test_the_schema_and_validate_agree_on_a_runbook_time_after_the_first_trigger(validators, tmp_path):
    """A rule's ``at: +DURATION``: the schema accepts what validate accepts and refuses what
    it refuses (it accepted '+30 min', which validate refuses)."""
    from orchestrator.errors import InvalidInput

    _, rb = validators
    pb = load_playbook("us-east-1-2021")
    action = pb.data["mitigations"][0]["name"]
    for at in ("+30m", "+ 15m", "+90", "+ 30", "+1h30m", "+1.5e2", "+30 min", "+-5", "+", "+m", "+ten minutes"):
        doc = {"name": "rel", "rules": [{"when": {"at": at}, "do": action}]}
        book = tmp_path / "rel.yaml"
        book.write_text(yaml.safe_dump(doc))
        try:
            load_runbook(str(book), pb)
            valid = True
        except InvalidInput:
            valid = False
        assert (not list(rb.iter_errors(doc))) == valid, (at, valid)


def test_the_schema_command_prints_json():
    for extra, title in (([], "gameday playbook (rendered)"), (["--runbook"], "gameday runbook")):
        result = CliRunner().invoke(main, ["playbooks", "schema", *extra])
        assert result.exit_code == 0
        assert json.loads(result.output)["title"] == title


# -- runbooks beside a user's playbook, and playbooks new ------------------------------------

def test_a_runbook_beside_a_user_playbook_is_found_by_name(tmp_path):
    text = (CORPUS / "valid_minimal.yaml.j2").read_text()
    (tmp_path / "mine.yaml.j2").write_text(text)
    (tmp_path / "runbooks" / "valid-minimal").mkdir(parents=True)
    rule = {"name": "n", "rules": [{"when": {"alarm": "bridge-hot"}, "do": "add_capacity"}]}
    (tmp_path / "runbooks" / "valid-minimal" / "hot.yaml").write_text(yaml.safe_dump(rule))
    (tmp_path / "runbooks" / "flat.yaml").write_text(yaml.safe_dump(rule))
    pb = load_playbook(str(tmp_path / "mine.yaml.j2"))
    for ref in ("hot", "flat"):
        _, rb = load_runbook(ref, pb)
        assert rb["rules"][0]["do"] == [{"action": "add_capacity", "params": {}}]
    shown = CliRunner().invoke(main, ["playbooks", "show", str(tmp_path / "mine.yaml.j2")])
    assert shown.exit_code == 0 and "runbooks: flat, hot, none" in shown.output
    missing = CliRunner().invoke(main, ["playbooks", "validate", str(tmp_path / "mine.yaml.j2"), "-r", "cold"])
    assert missing.exit_code == 2
    assert "the runbooks of valid-minimal are: hot, none, flat" in missing.output  # the most like "cold" first


@pytest.mark.slow
def test_playbooks_new_writes_a_playbook_that_validates_and_runs(tmp_path):
    runner = CliRunner()
    made = runner.invoke(main, ["playbooks", "new", "checkout", "--dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    path = tmp_path / "checkout.yaml.j2"
    assert sorted(p.name for p in (tmp_path / "runbooks" / "checkout").iterdir()) == ["historical.yaml", "none.yaml"]
    assert "gameday playbooks reference" in path.read_text()  # it points to the reference
    valid = runner.invoke(main, ["playbooks", "validate", str(path), "-r", "historical", "-r", "none"])
    assert valid.exit_code == 0, valid.output
    out = tmp_path / "run"
    ran = runner.invoke(main, ["run", str(path), "--hosting", "inprocess", "--duration", "1h", "--no-report",
                               "--no-attribution", "--no-progress", "--json", "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    score = json.loads(ran.stdout)
    assert score["loop_broken"]["reached"]  # its historical runbook breaks its loop
    meta = json.loads((out / "meta.json").read_text())
    assert meta["runbook"] == "historical" and meta["status"] == "complete"  # the playbook's own, by default
    again = runner.invoke(main, ["playbooks", "new", "checkout", "--dir", str(tmp_path)])
    assert again.exit_code == 2 and "already there" in again.output


def test_playbooks_new_copies_a_built_in_with_its_runbooks(tmp_path):
    made = CliRunner().invoke(main, ["playbooks", "new", "our-2021", "--from", "us-east-1-2021", "--dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    pb = load_playbook(str(tmp_path / "our-2021.yaml.j2"))
    assert pb.name == "our-2021"
    assert sorted(p.stem for p in (tmp_path / "runbooks" / "our-2021").iterdir()) == builtin_runbooks("us-east-1-2021")
    bad = CliRunner().invoke(main, ["playbooks", "new", "x", "--from", "nope", "--dir", str(tmp_path)])
    assert bad.exit_code == 2 and "--from: got 'nope'; expected one of starter, us-east-1-20" in bad.output


# -- conditions ------------------------------------------------------------------------------

def test_a_runbook_time_can_count_from_the_first_trigger(tmp_path):
    pb = load_playbook("us-east-1-2021")
    first = min(t["at"] for t in pb.data["triggers"])
    book = tmp_path / "rel.yaml"
    book.write_text(yaml.safe_dump({"name": "rel", "rules": [{"when": {"at": "+15m"}, "do": pb.data["mitigations"][0]["name"]}]}))
    _, rb = load_runbook(str(book), pb)
    assert rb["rules"][0]["when"]["at"] == first + 900
    assert rb["rules"][0]["when"]["for"] == 0.0  # defaults filled in from the one description


@pytest.mark.slow
def test_the_starters_loop_outlives_its_cause(tmp_path):
    """The starter is a metastable failure, not a scripted one: its capacity dip ends at
    07:20, and without anyone acting the retries keep the queue full to the end."""
    out = tmp_path / "none"
    ran = CliRunner().invoke(main, ["run", str(builtin_dir() / "templates" / "starter.yaml.j2"), "-r", "none",
                                    "--hosting", "inprocess", "--no-report", "--no-attribution", "--no-progress",
                                    "--json", "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    score = json.loads(ran.stdout)
    assert not score["loop_broken"]["reached"]
    import pandas as pd

    m = pd.read_csv(out / "metrics.csv")
    late = m[m["time_s"] >= 1800]  # from 07:30, ten minutes after the capacity is back
    assert late["api.goodput"].sum() == 0
    assert (late["clients.tries"] / late["clients.demand"]).mean() > 3  # four attempts, nearly all spent


def _outside(about):
    """A value an argument's declaration refuses, or None if it declares no choices or range."""
    if about.choices is not None:
        return "not-a-choice"
    if about.min is not None:
        return about.min - 1
    if about.max is not None:
        return about.max + 1
    return None


def test_every_agent_refuses_an_apply_outside_an_operations_declared_choices_or_range():
    """An apply from outside a playbook (a live console, a fault's params) is checked at the
    agent against the same declarations validation reads, once, in Agent.handle_apply."""
    import copy

    from orchestrator.engine.world import build_plan
    from orchestrator.hosting.inprocess import InProcessHost

    pb = load_playbook(find_playbook("us-east-1-2021"))
    agents = InProcessHost(build_plan(pb, None, 1, 60)).agents
    checked = set()
    for name, agent in agents.items():
        kind = agent.kind if agent.kind in AGENT_CLASSES else next(k for k, c in AGENT_CLASSES.items() if isinstance(agent, c))
        for op, info in operations(kind).items():
            for arg, a in info.args.items():
                bad = None if a.about is None else _outside(a.about)
                if bad is None:
                    continue
                args = {k: copy.deepcopy(v.default) for k, v in info.args.items() if not v.required}
                args |= {k: copy.deepcopy(info.example[k]) for k in info.example}
                args[arg] = bad
                agent.handle_apply(0, {"op": op, "args": args, "by": "test"})
                events = agent.finish({}).events
                assert [e["event"] for e in events] == ["apply_rejected"], (name, op, arg, events)
                assert events[0]["reason"].startswith(f"{arg} {bad!r}: expected "), events[0]
                checked.add((type(agent).__name__, op))
    assert len(checked) >= 20, sorted(checked)


def test_the_tick_is_held_to_the_timeouts_that_apply(tmp_path):
    """A per-request population's connection timeout does not apply (it opens no pooled
    connection), unless an effect may switch it to pooled."""
    from orchestrator.errors import InvalidInput

    base = {"name": "t", "title": "t", "clock": {"start": "00:00", "tick": "4s", "duration": "5m"},
            "services": [{"name": "svc"}],
            "populations": [{"name": "phones", "clients": 10, "rate": 1.0, "mode": "per_request", "target": "svc",
                             "request": {"timeout": "5s"}, "connection": {"timeout": "3s"}}]}
    path = tmp_path / "t.yaml.j2"
    path.write_text(yaml.safe_dump(base))
    assert load_playbook(str(path)).data["clock"]["tick"] == 4.0
    base["mitigations"] = [{"name": "pool", "effects": [{"target": "phones", "op": "set_mode", "args": {"mode": "pooled"}}]}]
    path.write_text(yaml.safe_dump(base))
    with pytest.raises(InvalidInput, match="populations\\[0\\].connection.timeout of phones: 3 s"):
        load_playbook(str(path))
