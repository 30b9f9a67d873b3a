"""The case library: directed and per-instruction programs, written once, run at every level.

``core`` defines a case (name, config, programs, DRAM images, registers, what to check) and the
levels' common parts: the reference and simulator runs, the outcome every level reports, and the
checks (the case's own expectation, and equality with the simulator for the levels below it).
``instructions`` holds one or a few cases per instruction, ``directed`` the hand-written programs
(examples, nests, branches, errors, rings, GEMMs), ``library`` the list of all of them and which
run at which level. ``tests/*/test_cases_*.py`` run them: one base class, one subclass per level.
"""
