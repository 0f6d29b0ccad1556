"""rules: the YAML rules and the sandboxed formulas they are written in.

Owns the rule-file schema, the vocabulary of names and functions a formula may use, the formula
compiler, loading and layering rule sets, the seed's engine (opportunities and proposals per
node) and `parplan rules check/explain`. May import `inputs` and `models`.
"""
