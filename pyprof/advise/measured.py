"""The estimates checked against measured savings (``scripts/validate.py --advise``): the last table
it printed on this project's CPU machine, kept here so that docs/advise.md is generated whole."""

from __future__ import annotations

#: (command, date, machine, table rows in markdown); filled from scripts/validate.py --advise
COMMAND = ""
DATE = ""
MACHINE = ""
TABLE = ""


def markdown() -> str:
    if not TABLE:
        return "The estimates have not yet been checked against measured savings."
    return (f"## Predicted vs measured\n\n`{COMMAND}` on {MACHINE}, {DATE}. Saved per step: before - after, "
            f"medians of the steps timed; spread: the range of the repeats' medians.\n\n{TABLE}")
