"""planning: choosing a layout.

Owns the search space, the constraint verdicts, the one evaluation of a layout (`evaluate`:
estimate and verdicts, `fits` from the memory rules), the planner that ranks candidate layouts,
and the plan document (plan.json) that everything downstream reads. May import `inputs`, `models`,
`rules` and `cost`.
"""
