"""Which probes read which module's calls, and at which site: the engine's lookups, made once."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.probes.probe import Probe

__all__ = ["Sites", "sites_of"]

Key = tuple[int, str]  # (module index, site)


class Sites(NamedTuple):
    """The probes by module and by ``(module, site)``, and what each key asks per call."""

    #: each selected module's probes
    by_module: dict[int, list[Probe]]
    #: each module's probes by the site they read: a hook skips the work of the sites
    #: nothing reads (most probes read one or two of the seven)
    by_site: dict[Key, list[Probe]]
    #: where a ``when`` predicate is asked (about a Context made for it) at each call
    asks_when: dict[Key, bool]
    #: the module names where a probe keeps every call's values: a gradient site's calls
    #: keep their place in ``rec[...]`` whether or not a gradient comes
    lists: dict[Key, Optional[str]]


def sites_of(table: ModuleTable, probes: Sequence[Probe]) -> Sites:
    """Resolve each probe's ``where`` on ``table``'s model (every module without one).

    >>> import torch
    >>> from torchgraphrec import probe, select
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    >>> found = sites_of(ModuleTable(model), [probe("output", where=select.name("^0$"))])
    >>> [(table_index, site) for table_index, site in found.by_site], list(found.lists.values())
    ([(1, 'output')], ['0'])
    """
    by_module: dict[int, list[Probe]] = {}
    for chosen in probes:
        found = chosen.where.resolve(table.model) if chosen.where else table.model.named_modules()
        for qualname, _ in found:
            index = table.module_by_qualname(qualname)
            if index is not None:
                by_module.setdefault(index, []).append(chosen)
    by_site: dict[Key, list[Probe]] = {}
    for index, chosen_probes in by_module.items():
        for chosen in chosen_probes:
            by_site.setdefault((index, chosen.site), []).append(chosen)
    asks_when = {key: any(p.when is not None for p in chosen_probes)
                 for key, chosen_probes in by_site.items()}
    lists = {key: table.qualnames[key[0]] if any(p.reduce == "all" for p in chosen_probes)
             else None for key, chosen_probes in by_site.items()}
    return Sites(by_module, by_site, asks_when, lists)
