"""A playbook template renders within gameday's budget for a template (orchestrator/budgets.py):
in a forked child with a memory limit and an alarm, killed if it does not answer. Each hostile
template is refused with a message naming the budget and, where the child could say, the line;
ordinary templates and the built-in playbooks render exactly as before; no child is left behind.

Every test forks for real; the budgets are lowered so that each takes well under a second or two.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator import budgets
from orchestrator.cli import main
from orchestrator.errors import InvalidPlaybook
from orchestrator.playbook import sandbox_process
from orchestrator.playbook.files import builtin_playbooks
from orchestrator.playbook.loader import load_playbook
from orchestrator.playbook.template import Template, render

HEADER = "variables:\n  n:\n    default: 3\n    description: a number\n---\n"
BODY_LINE = 6  # the file line the body starts on, after HEADER
WITHIN = "a template that renders within 0.5 s and 64 MiB (gameday's budget for a template: "
TOOK = "got 'the template took more than 0.5 s to render'; expected " + WITHIN
NEEDED = "got 'the template needed more than 64 MiB of memory to render'; expected " + WITHIN


@pytest.fixture(autouse=True)
def small_budgets(monkeypatch):
    monkeypatch.setattr(budgets, "TEMPLATE_SECONDS", 0.5)
    monkeypatch.setattr(budgets, "TEMPLATE_MEMORY", 64 * 2**20)
    monkeypatch.setattr(budgets, "RENDERED_BYTES", 100 * 2**10)
    monkeypatch.setattr(sandbox_process, "GRACE_SECONDS", 1.0)  # (room for a busy machine: past it, the line is lost)


@pytest.fixture(autouse=True)
def no_child_left_behind():
    before = _children()
    yield
    assert _children() <= before, "a rendering child was left running or unreaped"


def _children() -> set[int]:
    """This process's children, running or zombie (every thread's, as /proc lists them)."""
    tasks = Path("/proc/self/task")
    if not tasks.exists():
        return set()
    return {int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()}


def template(body: str) -> Template:
    return Template(name="hostile", source="hostile.yaml.j2", header={}, body=body, body_line=BODY_LINE)


def refusal(body: str, values: dict | None = None) -> str:
    """The one issue rendering ``body`` is refused with."""
    with pytest.raises(InvalidPlaybook) as e:
        render(template(body), values or {"n": 3})
    assert e.value.stage == "render" and len(e.value.issues) == 1, str(e.value)
    return str(e.value.issues[0])


def line(n: int) -> str:
    """How an issue names the body's line ``n``."""
    return f"line {n + BODY_LINE - 1}: "


# -- memory ---------------------------------------------------------------------------------

def test_a_huge_repetition_is_refused_as_over_the_memory_budget_with_its_line():
    assert refusal("a: 1\nb: {{ 'a' * 4000000000 }}\n") == line(2) + NEEDED + \
        "loops over range(...) and large powers or repetitions are the usual cause)"


def test_a_huge_centre_filter_and_format_width_are_refused_as_over_the_memory_budget():
    assert refusal("a: {{ 'a'|center(10**10) }}\n").startswith(line(1) + NEEDED)
    assert refusal("a: 1\n\nb: {{ '{:>9999999999}'.format(1) }}\n").startswith(line(3) + NEEDED)


def test_a_string_doubled_in_a_loop_is_refused_as_over_the_memory_budget_with_its_line():
    body = "{% set ns = namespace(s='a') %}\n{% for i in range(64) %}\n{% set ns.s = ns.s ~ ns.s %}\n{% endfor %}\n"
    assert refusal(body).startswith(line(3) + NEEDED)


# -- time ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_nested_range_loops_are_refused_as_over_the_time_budget_with_their_line():
    body = "a: 1\n{% for i in range(100000) %}\n{% for j in range(100000) %}{{ '' }}{% endfor %}\n{% endfor %}\n"
    assert refusal(body).startswith(line(3) + TOOK)  # (the alarm's: the kill's names no line)


@pytest.mark.slow
def test_a_huge_power_is_refused():
    assert TOOK in refusal("a: 1\nb: {{ 9**(9**9) }}\n")


def test_a_child_that_does_not_answer_by_the_deadline_is_killed_and_the_budget_named_without_a_line(monkeypatch):
    """The parent's deadline is the last word (a long operation in C never returns to Python
    for the alarm to interrupt): here it comes before the child's alarm, so the parent kills."""
    monkeypatch.setattr(sandbox_process, "GRACE_SECONDS", -0.4)
    started = time.monotonic()
    issue = refusal("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    assert issue.startswith("template: " + TOOK), issue
    assert time.monotonic() - started < 0.5


@pytest.mark.slow
def test_a_child_deaf_to_its_alarm_is_killed_at_the_deadline():
    def deaf():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(30)

    started = time.monotonic()
    with pytest.raises(sandbox_process.NoAnswer) as e:
        sandbox_process.run_in_child(deaf, 0.2, 2**20)
    assert e.value.reason == "time"
    assert time.monotonic() - started < 0.2 + sandbox_process.GRACE_SECONDS + 0.5


def test_a_child_that_dies_is_reported_with_how_it_ended():
    with pytest.raises(sandbox_process.NoAnswer) as e:
        sandbox_process.run_in_child(lambda: os.kill(os.getpid(), signal.SIGKILL), 5, 2**20)
    assert (e.value.reason, e.value.how) == ("died", "killed by signal 9 (Killed)")


def test_an_interrupted_parent_kills_and_reaps_its_child():
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            render(template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), {})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # (no_child_left_behind checks the child is gone)


@pytest.mark.slow
def test_a_template_rendered_from_a_thread_is_bounded_too():
    """The live server and comparisons may render off the main thread: the forked child is a
    process of its own, whose alarm still names the line."""
    issues = []

    def in_thread():
        try:
            render(template("a: 1\n{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), {})
        except InvalidPlaybook as e:
            issues.extend(map(str, e.issues))

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(10)
    assert issues and issues[0].startswith(line(2) + TOOK), issues


# -- the text --------------------------------------------------------------------------------

def test_a_rendering_over_the_text_budget_is_refused_with_its_line():
    issue = refusal("a: 1\nb: |\n{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}\n")
    assert issue == line(3) + "got 'the template rendered more than 100 KiB of text'; expected a template that " \
        "renders at most 100 KiB (gameday's budget for a rendered playbook: loops over range(...) and large " \
        "repetitions are the usual cause)"


def test_a_rendering_of_exactly_the_text_budget_is_accepted():
    assert render(template("{{ 'x' * 102400 }}"), {}) == "x" * 102400


# -- what renders, renders as before ---------------------------------------------------------

def test_an_ordinary_template_renders_in_the_child():
    body = "name: {{ name }}\n{% for i in range(n) %}- {{ i * 2 }}: \"é\"\n{% endfor %}"
    assert render(template(body), {"name": "x", "n": 3}) == 'name: x\n- 0: "é"\n- 2: "é"\n- 4: "é"\n'


@pytest.mark.parametrize("name", builtin_playbooks())
def test_every_built_in_playbook_renders_as_it_does_in_process(name, monkeypatch):
    forked = load_playbook(name)
    monkeypatch.delattr(os, "fork")  # rendered in process, as where there is no fork
    assert load_playbook(name).text == forked.text
    assert forked.data["name"]


@pytest.mark.parametrize("body, expected", [
    ("a: 1\nb: {{ m }}\n", "line 7: got \"'m' is undefined\"; expected only defined variables (n)"),
    ("a: {{ n.__class__ }}\n",
     "line 6: got \"access to attribute '__class__' of 'int' object is unsafe.\"; expected no access to unsafe attributes"),
    ("a: 1\nb: {{ n }\n", "line 7: got \"unexpected '}'\"; expected valid Jinja2 syntax"),
    ("a: {{ n // 0 }}\n", "line 6: got 'ZeroDivisionError: integer division or modulo by zero'; expected a template "
                          "that renders"),
], ids=["undefined", "unsafe", "syntax", "arithmetic"])
def test_the_templates_own_mistakes_read_as_before(body, expected, monkeypatch):
    assert refusal(body) == expected
    monkeypatch.delattr(os, "fork")
    assert refusal(body) == expected


# -- the command line ------------------------------------------------------------------------

def test_validate_refuses_a_template_over_its_budget_with_a_message_not_a_traceback(tmp_path):
    path = tmp_path / "hostile.yaml.j2"
    path.write_text(HEADER + "name: hostile\ntitle: {{ 'a' * 4000000000 }}\n")
    result = CliRunner().invoke(main, ["playbooks", "validate", str(path)])
    assert isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr == f"error: {path}: 1 error (render)\n  line 7: {NEEDED}loops over range(...) and large " \
                            "powers or repetitions are the usual cause)\n"
