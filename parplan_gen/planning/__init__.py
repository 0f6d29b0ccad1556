"""planning: choosing a layout.

Owns the search space, the constraint verdicts, the planner that ranks candidate layouts, and
the plan document (plan.json) that everything downstream reads. May import `inputs`, `models`,
`rules` and `cost`.
"""
