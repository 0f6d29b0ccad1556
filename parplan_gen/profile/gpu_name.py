"""Which catalog GPU (`parplan_gen/data/gpus.yaml`) the profiled device is: `--gpu NAME` when
given, else the name the device reports, looked up as a catalog name, alias or display name
(case-insensitive), with a vendor prefix dropped ("NVIDIA A100-SXM4-80GB" -> a100-sxm4-80gb),
or in the table of reported names the catalog does not spell (profile_sweeps.yaml
`device_names`). A device none of these names is refused: give `--gpu`."""

from __future__ import annotations

from parplan_gen.cost.catalog import Catalog, load_catalog, lookup, normal_name
from parplan_gen.inputs.errors import InputError, SourceRef, shown_value
from parplan_gen.profile.sweeps import sweeps


def _normal(name: str) -> str:
    # the catalog's key, with a run of white space (as a device may report it) one `-`
    return normal_name(" ".join(name.split()))


def catalog_gpu(given: str | None, device_name: str | None) -> str:
    """The catalog name of the GPU: `given` (the --gpu flag) if any, else `device_name`'s."""
    catalog = load_catalog()
    if given is not None:
        return lookup("GPU", given, catalog.gpu_names, SourceRef("--gpu"))
    if device_name is None:  # a CPU profile: the test file names the placeholder GPU
        return sweeps().cpu_placeholder_gpu
    found = device_gpu(device_name, catalog)
    if found is None:
        known = ", ".join(sorted(catalog.gpus))
        raise InputError(
            f"--gpu: the device {shown_value(device_name)} is no catalog GPU; give --gpu NAME "
            f"for the catalog GPU it is (known: {known})"
        )
    return found


def device_gpu(device_name: str, catalog: Catalog | None = None) -> str | None:
    """The catalog GPU a device reporting `device_name` is, or None."""
    catalog = catalog or load_catalog()
    table = sweeps().device_names
    for reported, entry in table.names.items():
        if _normal(reported) == _normal(device_name):
            return entry.gpu
    names = dict(catalog.gpu_names)
    names.update({_normal(spec.display_name): name for name, spec in catalog.gpu_specs.items()})
    key = _normal(device_name)
    candidates = [key] + [
        key.removeprefix(f"{prefix}-")
        for prefix in table.vendor_prefixes
        if key.startswith(f"{prefix}-")
    ]
    for candidate in candidates:
        if candidate in names:
            return names[candidate]
    return None
