"""The backends: the frameworks that run a plan, one folder each (docs/backends.md).

A backend's folder holds what it owns:

- `capabilities.py`: what it can run at all (layout dimensions, optimizer sharding,
  recomputation) and the release it follows (`Capabilities`, capabilities.py here; the planning
  layer's registry is `planning.backends.BACKENDS`);
- `constraints.yaml`: what it refuses within that, each rule `backend: <name>` with the
  framework source that enforces it (built-in rules: `inputs.resources.builtin_rule_files`);
- `mapping.yaml`: its section of the mapping (canonical plan keys -> its names), read together
  with templates/mapping.yaml as one mapping (`render.mapping.load_mapping`);
- `templates/<version>/`: its files' templates, named `<name>/<version>/<file>.j2` by the
  renderer (a `--templates DIR` overrides one as DIR/<name>/<version>/<file>.j2);
- `facts.py`: its canonical facts (`<name>.*`), which render/facts.py gathers;
- `reader.py`: reading its files back (`parplan check --from-<name>`).

`capabilities.py` belongs to the planning layer, `facts.py` and `reader.py` to the render layer
(docs/architecture.md); these `__init__` modules import nothing, so importing one part never
brings in another. ddp has capabilities only: its files are the launchers every plan has.
"""
