"""Wrong types anywhere never crash kgen lint: the schema reports them, the rules stay quiet."""

from __future__ import annotations

import copy

import pytest
from lint_helpers import BASES, lint_docs


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@pytest.mark.parametrize("base", ["job", "sts"])
def test_every_field_replaced_by_wrong_types_lints_without_crashing(base):
    docs = BASES[base]()
    paths = list(_paths(docs))[1:]
    runs = 0
    for i, path in enumerate(paths):
        for value in [None, "x", [None], {"a": 1}] if i % 2 else [1, [], True, -5]:
            mutated = copy.deepcopy(docs)
            node = mutated
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = value
            result = lint_docs(mutated)  # must not raise
            assert result.exit_code in (0, 1)
            runs += 1
    assert runs > 300
