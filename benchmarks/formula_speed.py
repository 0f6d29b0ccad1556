"""Print the cost of evaluating typical compiled formulas (µs per evaluation).

Run: python benchmarks/formula_speed.py
"""

from __future__ import annotations

import timeit

from parplan_gen.inputs.errors import SourceRef
from parplan_gen.rules.formulas import FormulaLibrary

WHERE = SourceRef("bench.yaml", 1, 1)
ENV = {
    "graph.node_count": 25,
    "graph.depth": 21,
    "graph.op_count.MatMul": 6,
    "node.attr.flops": 2.0e9,
    "node.has.flops": True,
}
CASES = [
    ("2.0 * clamp(graph.node_count / 10, 1, 2)", "graph"),
    ("dp_speedup * 0.9", "graph"),
    ("graph.op_count.MatMul >= 2 and graph.depth ** 2 > 10", "graph"),
    ("node.attr.flops if node.has.flops else 0", "node"),
    ("graph.depth > 4", "graph"),
]


def main() -> None:
    library = FormulaLibrary({"dp_speedup": ("2.0 * clamp(graph.node_count / 10, 1, 2)", WHERE)})
    for text, context in CASES:
        formula = library.compile(text, WHERE, context)
        runs = 200_000
        best = min(timeit.repeat(lambda f=formula: f.evaluate(ENV), number=runs, repeat=5))
        print(f"{best / runs * 1e6:6.2f} µs  {text}")


if __name__ == "__main__":
    main()
