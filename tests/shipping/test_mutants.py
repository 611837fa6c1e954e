"""The curated mutation list (scripts/mutations.py) stays in step with the code: each mutation still finds its
one line, and the mutated file still compiles. Running the mutants themselves is `make mutants`."""

from __future__ import annotations

import pytest

from scripts.mutations import MUTATIONS, Mutation
from testkit.servers import REPO


def test_the_list_is_curated_and_covers_the_parity_table():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names)) >= 12
    assert sum(m.parity for m in MUTATIONS) == 10  # the parity table of issue 14, row for row
    assert all(m.caught_by and all((REPO / f).is_file() for f in m.caught_by) for m in MUTATIONS)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_to_exactly_one_line_and_compiles(mutation: Mutation):
    source = (REPO / mutation.path).read_text()
    mutated = mutation.apply(source)  # ValueError unless the original line is there exactly once
    assert mutated != source
    compile(mutated, mutation.path, "exec")
