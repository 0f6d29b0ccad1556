"""inputs: reading what users give, and saying what is wrong with it.

Owns source loading (bounded YAML/JSON with line numbers), the error types, pydantic
validation with positions, the folders shipped with the package, and the two ways to show
user text (escaped and bounded) or read a number from it. Imports nothing else of parplan_gen:
every other layer builds on this one.
"""
