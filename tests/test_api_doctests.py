"""The examples in orchestrator/api.py's docstrings (shown in docs/reference/api.md) run as
doctests and print what they show."""
from __future__ import annotations

import doctest

import pytest

import orchestrator
import orchestrator.api


@pytest.mark.slow
def test_the_api_examples_run():
    result = doctest.testmod(orchestrator.api, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of orchestrator/api.py failed (above)"
    assert result.attempted >= 4


def test_each_public_function_has_an_example():
    for name in orchestrator.__all__:
        assert ">>> " in getattr(orchestrator.api, name).__doc__, name
