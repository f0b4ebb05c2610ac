"""Scripts the TARGET env's interpreter runs by path: the env probe, the matrix's import checks,
the engine runner.

Standard library plus the env's own packages (sglang, torch) only, imported inside functions:
they import nothing from `ddtree_overlay`, since the env need not have it installed.
"""
