"""The price of a GPU-hour for each GPU type of a frontier (`--gpu-hour-price`): one price for
every type (`2.5`), or one per type (`h100=2.5,b200=4.0`; a type left out has none), each
checked as the cluster file's `gpu_hour_price` is and named by its catalog name.

An error names the item that is wrong (`--gpu-hour-price: item 'b200:4' ...`); the API's
wording turns the flag into the parameter (`gpu_hour_price`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parplan_gen.cost.budget_figures import budget_figure_problem
from parplan_gen.cost.catalog import load_catalog, lookup
from parplan_gen.inputs.errors import InputError, SourceRef, shown_value
from parplan_gen.inputs.number_text import ascii_decimal

FLAG = "--gpu-hour-price"
PriceArgument = float | str | Mapping[str, float] | None
ITEM_SEPARATOR, NAME_SEPARATOR = ",", "="


def gpu_type(name: str, flag: str = "--gpu") -> str:
    """The catalog name of the GPU `name`, or the catalog's InputError (`unknown GPU ...`)."""
    catalog = load_catalog()
    return lookup("GPU", name, catalog.gpu_names, SourceRef(flag))


def prices_for(asked: PriceArgument, gpu_types: Sequence[str]) -> dict[str, float | None]:
    """Each of `gpu_types` (catalog names) -> its price (None: not given)."""
    if asked is None:
        return dict.fromkeys(gpu_types)
    if isinstance(asked, Mapping):
        table = _mapping(asked)
    elif isinstance(asked, str) and NAME_SEPARATOR in asked:
        table = _parse(asked)
    else:
        price = _price(asked.strip(), shown_value(asked)) if isinstance(asked, str) else asked
        _check(price, shown_value(asked))
        return dict.fromkeys(gpu_types, float(price))
    unknown = sorted(set(table) - set(gpu_types))
    if unknown:
        raise InputError(
            f"{FLAG}: a price for {', '.join(unknown)}, which is not among the GPUs asked "
            f"({', '.join(gpu_types)})"
        )
    return {gpu: table.get(gpu) for gpu in gpu_types}


def _parse(text: str) -> dict[str, float]:
    """`h100=2.5,b200=4.0` -> {catalog name: price}; an InputError names the bad item."""
    table: dict[str, float] = {}
    for item in text.split(ITEM_SEPARATOR):
        name, sep, number = item.partition(NAME_SEPARATOR)
        if not sep or not name.strip() or not number.strip():
            raise InputError(
                f"{FLAG}: item {shown_value(item)} is not GPU=PRICE "
                "(h100=2.5,b200=4.0, or one price for every GPU: 2.5)"
            )
        _add(table, name.strip(), _price(number.strip(), shown_value(item)))
    return table


def _mapping(asked: Mapping[str, float]) -> dict[str, float]:
    table: dict[str, float] = {}
    for name, price in asked.items():
        _check(price, shown_value(f"{name}={price}"))
        _add(table, str(name), float(price))
    return table


def _add(table: dict[str, float], name: str, price: float) -> None:
    gpu = gpu_type(name, FLAG)
    if gpu in table:
        raise InputError(f"{FLAG}: {gpu} is priced twice")
    table[gpu] = price


def _price(text: str, item: str) -> float:
    try:
        price = ascii_decimal(text)
    except ValueError as exc:
        raise InputError(f"{FLAG}: item {item}: {exc}") from None
    _check(price, item)
    return price


def _check(price: object, item: str) -> None:
    problem = budget_figure_problem("gpu_hour_price", price)
    if problem:
        raise InputError(f"{FLAG}: item {item}: {problem}")
