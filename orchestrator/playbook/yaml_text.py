"""YAML as playbooks and runbooks are read: every key of a mapping once, errors located in the file."""
from __future__ import annotations


import yaml

from orchestrator.errors import InvalidPlaybook, Issue


DUPLICATE_KEY = "found duplicate key"


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
                    raise yaml.constructor.ConstructorError("while constructing a mapping", earlier.start_mark,
                                                            f"{DUPLICATE_KEY} {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str):
    """``text`` as YAML, every key of a mapping given once."""
    return yaml.load(text, Loader=_OneKeyOnce)


def _yaml_loc(e: yaml.YAMLError, first_line: int = 1) -> str:
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + first_line}, column {mark.column + 1}" if mark else "yaml"


def yaml_issue(e: yaml.YAMLError, first_line: int = 1) -> Issue:
    # PyYAML notices a problem where it stops; its context (an unclosed "[" ...) is often the real mistake
    expected = "valid YAML"
    ctx, mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if str(getattr(e, "problem", "")).startswith(DUPLICATE_KEY) and mark:
        expected = f"each key once in a mapping (it is first at line {mark.line + first_line}, column {mark.column + 1})"
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
