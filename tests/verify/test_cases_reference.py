"""The case library (``verify.cases``) at the reference level: each program run in program order on
``isa.semantics`` (``verify.reference``) gives the case's expectation, and the simulator's final
memories and registers; and every instruction of the table has a case."""

from __future__ import annotations

import pytest

from isa.table import INSTRUCTIONS
from tests.levels import CaseTests
from verify.cases import core, library
from verify import reference


class TestReference(CaseTests):
    level = core.REFERENCE

    def run(self, case):
        outs = core.run_reference(case)
        core.check_against_sim(case, outs)
        return outs


def test_every_instruction_has_a_case():
    used = set().union(*(c.mnemonics() for c in library.CASES))
    assert {i.mnemonic for i in INSTRUCTIONS} - used == set()


def test_the_reference_refuses_links():
    with pytest.raises(reference.NotModelled, match="link.send needs a link"):
        reference.run("tiny", library.by_name("ring2-pass-around").setup.progs[0])
