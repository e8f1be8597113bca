"""Optimizer state tied to the parameters it belongs to: `optimizer.state.16.exp_avg` -> `model.layers.1.ffn.w2.weight`.

torch saves optimizer state by parameter index (the order of `model.parameters()`, listed per group in
`param_groups[i]["params"]`), not by name. The model's state dict lists the same parameters in the
same order, plus buffers, and a tied weight twice. So: walk the indices in `param_groups` order
against the model's tensors in order, skipping a tied repeat (same storage as one already taken)
and any tensor whose shape does not match the state's moments (a buffer). If the two run out of
step, nothing is mapped: a wrong name is worse than none.
"""

from __future__ import annotations

import re

from ckinspect.formats.tree import walk
from ckinspect.model import Checkpoint, TensorInfo

TYPE_CHECKING = False  # the JSON report's path imports this module, and never `typing`
if TYPE_CHECKING:
    from typing import Any

_STATE = re.compile(r"^(?P<prefix>(?:.*\.)?)state\.(?P<index>\d+)\.(?P<key>.+)$")


def optimizer_params(ckpt: Checkpoint) -> dict[str, str]:
    """Optimizer state tensor name -> parameter name, where the checkpoint allows it (else {})."""
    states: dict[str, dict[int, list[TensorInfo]]] = {}  # optimizer prefix -> index -> its state tensors
    for t in ckpt.tensors:
        if t.group != "optimizer":
            continue
        m = _STATE.match(t.name)
        if m:
            states.setdefault(m["prefix"], {}).setdefault(int(m["index"]), []).append(t)
    model = [t for t in ckpt.tensors if t.group == "model"]
    if not states or not model:
        return {}
    out: dict[str, str] = {}
    for prefix, by_index in states.items():
        order = _param_order(ckpt, prefix) or sorted(by_index)
        params = _align(order, by_index, model)
        if params is None:
            continue
        for index, param in params.items():
            for t in by_index.get(index, []):
                out[t.name] = param.name
    return out


def names_by_index(mapping: dict[str, str]) -> dict[tuple[str, int], str]:
    """(optimizer prefix, parameter index) -> parameter name, from `optimizer_params`' answer: what an
    index in `<prefix>param_groups[i]["params"]` stands for."""
    out: dict[tuple[str, int], str] = {}
    for state, param in mapping.items():
        m = _STATE.match(state)
        if m:
            out[(m["prefix"], int(m["index"]))] = param
    return out


def _param_order(ckpt: Checkpoint, prefix: str) -> list[int]:
    """The parameter indices in `<prefix>param_groups`, group after group ([] when not found)."""
    if ckpt.tree is None:
        return []
    wanted = prefix + "param_groups"
    for path, node in walk(ckpt.tree):
        if path == wanted and isinstance(node, (list, tuple)):
            order: list[int] = []
            for group in node:
                ids: Any = group.get("params") if isinstance(group, dict) else None
                if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) for i in ids):
                    return []
                order.extend(ids)
            return order
    return []


def _align(
    order: list[int], by_index: dict[int, list[TensorInfo]], model: list[TensorInfo]
) -> dict[int, TensorInfo] | None:
    """Each index's parameter, by order checked by shape; None when the two cannot be aligned."""
    taken_storages: set[str] = set()
    out: dict[int, TensorInfo] = {}
    position = 0
    for index in order:
        moments = [t for t in by_index.get(index, []) if t.shape]  # a scalar `step` says nothing of the shape
        shape = moments[0].shape if moments else None
        while position < len(model):
            candidate = model[position]
            position += 1
            if candidate.storage_key in taken_storages:
                continue  # a tied weight listed again: one parameter
            if shape is None or tuple(candidate.shape) == tuple(shape):
                taken_storages.add(candidate.storage_key)
                out[index] = candidate
                break
        else:
            return None
    return out
