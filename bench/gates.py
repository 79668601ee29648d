"""A benchmark's goals as gates: each goal is checked, printed with its verdict, and the bench
exits 1 when any is missed, so a goal that is printed can also fail.

    gates = Gates()
    gates.at_least("QA / bare decode", ratio, 0.8, "x")
    gates.at_most("peak RSS", peak_mb, 600, " MB")
    return gates.exit_code()

BENCH_GOAL_FACTOR (default 1) tightens every goal by that factor (an "at least" goal
multiplied by it, an "at most" goal divided by it): BENCH_GOAL_FACTOR=100 shows a bench
failing on a goal it would meet.
"""

import os
import sys


def goal_factor() -> float:
    factor = float(os.environ.get("BENCH_GOAL_FACTOR", "1"))
    if factor <= 0:
        raise SystemExit("BENCH_GOAL_FACTOR is a positive number")
    return factor


class Gates:
    def __init__(self) -> None:
        self.factor = goal_factor()
        self.missed: list[str] = []

    def _check(self, name: str, value: float, goal: float, met: bool, sign: str, unit: str):
        verdict = "met" if met else "MISSED"
        line = f"gate: {name} {value:.3g}{unit} (goal {sign} {goal:.3g}{unit}): {verdict}"
        print(line, flush=True)
        if not met:
            self.missed.append(line)
        return met

    def at_least(self, name: str, value: float, goal: float, unit: str = "") -> bool:
        goal = goal * self.factor
        return self._check(name, value, goal, value >= goal, ">=", unit)

    def at_most(self, name: str, value: float, goal: float, unit: str = "") -> bool:
        goal = goal / self.factor
        return self._check(name, value, goal, value <= goal, "<=", unit)

    def exit_code(self, *, errors: int = 0) -> int:
        """1 when a goal was missed (or `errors` is not 0), else 0; says which on stderr."""
        for line in self.missed:
            print(f"FAILED {line}", file=sys.stderr)
        if errors:
            print(f"FAILED {errors} errors", file=sys.stderr)
        return 1 if self.missed or errors else 0
