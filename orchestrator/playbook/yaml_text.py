"""YAML as playbooks and runbooks are read: every key of a mapping once, within the budgets
of orchestrator.budgets (nesting, nodes with aliases expanded, integer digits), errors
located in the file."""
from __future__ import annotations

import sys

import yaml

from orchestrator import budgets
from orchestrator.errors import InvalidPlaybook, Issue


DUPLICATE_KEY = "found duplicate key"


class Refused(yaml.MarkedYAMLError):
    """A document that parses but is not taken, located where and saying what was expected."""

    def __init__(self, problem: str, expected: str, mark):
        super().__init__(problem=problem, problem_mark=mark)
        self.expected = expected


class OverBudget(Refused):
    """A document beyond one of the YAML budgets."""


#: the tags of the types JSON cannot hold (what a run directory writes the playbook as)
_NOT_PLAIN = {"tag:yaml.org,2002:" + t: what for t, what in (
    ("binary", "bytes"), ("set", "a set"), ("omap", "an ordered map"), ("pairs", "pairs"),
    ("timestamp", "a date or time"))}


class _OneKeyOnce(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error:
    PyYAML keeps the last one, so a field written twice would silently lose the first
    (merged keys, ``<<``, may still be overridden: that is what they are for)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:  # (an unhashable key: PyYAML's own error follows)
                    continue
                if earlier is not key_node:
                    same = None if earlier.value == key_node.value else (  # (1 and true, 1 and 1.0)
                        f"the keys {earlier.value} and {key_node.value} are one key once YAML has read them: quote "
                        "them to keep them apart")
                    raise yaml.constructor.ConstructorError("while constructing a mapping", earlier.start_mark,
                                                            f"{DUPLICATE_KEY} {key!r}", key_node.start_mark, same)
        return super().construct_mapping(node, deep=deep)


class _Budgeted(_OneKeyOnce):
    """The loader with budgets, counted while the document is composed, before anything is
    built from it: nesting (PyYAML composes recursively: 3,000 levels are a RecursionError),
    nodes with every alias counted as often as it is used (aliases cost nothing to parse, but
    whatever walks the document walks them all), no alias inside the node it names (a
    structure that contains itself never ends), and integers short enough to convert."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = self._nodes = 0
        self._expanded: dict[int, int] = {}  # id(node) of an anchored node -> its nodes, aliases expanded
        self._open: set[str] = set()  # anchors whose node is still being composed

    def compose_document(self):
        try:
            return super().compose_document()
        finally:
            self._expanded.clear()

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise OverBudget(f"the alias *{event.anchor} inside the node &{event.anchor} it names",
                                 "no alias inside its own anchor's node (a structure that contains itself)",
                                 event.start_mark)
            node = super().compose_node(parent, index)
            self._count(self._size(node), event.start_mark)
            return node
        self._depth += 1
        if self._depth > budgets.YAML_DEPTH:
            raise OverBudget(f"mappings and lists nested over {budgets.YAML_DEPTH} deep",
                             f"at most {budgets.YAML_DEPTH} levels of nesting (gameday's budget for a YAML document)",
                             event.start_mark)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.add(anchor)
        self._count(1, event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open.discard(anchor)

    def _count(self, nodes: int, mark) -> None:
        self._nodes += nodes
        if self._nodes > budgets.YAML_NODES:
            raise OverBudget(f"over {budgets.YAML_NODES:,} nodes with its aliases expanded",
                             f"a document of at most {budgets.YAML_NODES:,} nodes, every alias counted as often as it "
                             "is used (gameday's budget for a YAML document)", mark)

    def _size(self, node) -> int:
        """The nodes of ``node`` with the aliases inside it expanded (each anchored node
        counted once: the sizes of nodes used many times are kept)."""
        if id(node) in self._expanded:
            return self._expanded[id(node)]
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._size(n) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
        else:
            size = 1
        if size > 1:
            self._expanded[id(node)] = size
        return size

    def construct_yaml_int(self, node):
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > sys.get_int_max_str_digits() > 0:
            raise OverBudget(f"an integer of {digits:,} digits", f"an integer of at most "
                             f"{sys.get_int_max_str_digits():,} digits", node.start_mark)
        value = super().construct_yaml_int(node)
        return Sexagesimal(value, str(node.value)) if ":" in str(node.value) else value


class Sexagesimal(int):
    """An unquoted 1:30, which YAML 1.1 reads as the integer 90 (base 60): right for a clock
    time or a duration, a slip anywhere else, where validation refuses it naming what it
    was read as (``schema.sexagesimal_wanted``). It keeps the text written."""

    def __new__(cls, value: int, text: str):
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __getnewargs__(self):
        return int(self), self.text

    def __repr__(self) -> str:
        return self.text


_Budgeted.add_constructor("tag:yaml.org,2002:int", _Budgeted.construct_yaml_int)


def _not_plain(loader, node):
    raise Refused(f"!!{node.tag.rsplit(':', 1)[-1]} ({_NOT_PLAIN[node.tag]})", "a plain YAML value (text, a number, true or "
                  "false, a list or a mapping; write a date or time as quoted text)", node.start_mark)


for _tag in _NOT_PLAIN:
    _Budgeted.add_constructor(_tag, _not_plain)
# An unquoted date (2021-12-07) stays the text it is written as: YAML 1.1 reads it as a date,
# which no field takes and no file of a run directory can hold.
_Budgeted.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in _NOT_PLAIN]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def load_yaml(text: str):
    """``text`` as YAML, every key of a mapping given once, within the YAML budgets."""
    return yaml.load(text, Loader=_Budgeted)


def _yaml_loc(e: yaml.YAMLError, first_line: int = 1) -> str:
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + first_line}, column {mark.column + 1}" if mark else "yaml"


def yaml_issue(e: yaml.YAMLError, first_line: int = 1) -> Issue:
    # PyYAML notices a problem where it stops; its context (an unclosed "[" ...) is often the real mistake
    expected = "valid YAML"
    ctx, mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if isinstance(e, Refused):
        expected = e.expected
    elif str(getattr(e, "problem", "")).startswith(DUPLICATE_KEY) and mark:
        expected = f"each key once in a mapping (it is first at line {mark.line + first_line}, column {mark.column + 1}" \
                   + (f"; {e.note})" if getattr(e, "note", None) else ")")
    elif ctx and mark:
        expected += f" ({ctx} at line {mark.line + first_line}, column {mark.column + 1})"
    if getattr(e, "problem", "") == "mapping values are not allowed here":
        expected += " (a ': ' inside an unquoted value starts a mapping: quote the value)"
    return Issue(_yaml_loc(e, first_line), getattr(e, "problem", "") or str(e).splitlines()[0], expected)


def parse_yaml(text: str, source: str, error_cls=InvalidPlaybook, first_line: int = 1, allow_empty: bool = False,
               stage: str = "parse", expected: str = "a YAML mapping"):
    """``first_line``: the file line ``text`` starts on (a playbook's body follows its header)."""
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as e:
        raise error_cls(source, stage, [yaml_issue(e, first_line)])
    if doc is None and allow_empty:
        return None
    if not isinstance(doc, dict):
        raise error_cls(source, stage, [Issue("document", doc, expected)])
    return doc
