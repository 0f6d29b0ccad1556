"""cli: the `parplan` command: argument parsing and text views only.

Every command is a thin shell over the library (`parplan_gen.api` and the layers below): it
parses flags into library calls and prints what comes back. Nothing below imports it.
"""
