"""The module put in place of mlx-lm's ``SwitchGLU`` / ``SwitchMLP``, and its installation.

``install`` runs on a model loaded lazily (``mlx_lm.load(lazy=True)``), before anything is
evaluated: each switch module's stacked projections are swapped for a bank's C-expert
projections, so the stacked tensors are never read. The wrapped module keeps mlx-lm's own
math (sorting, activation, ``gather_mm``/``gather_qmm``); only the indices change: the
router's expert ids become slot ids.

A step whose tokens route to more unique experts than the bank has slots (a prefill) runs
in waves: the (token, expert) pairs are grouped by expert, at most C experts per wave, the
resident ones first (no re-read); each pair's output depends on its expert alone, so the
waves' outputs put back in order are the layer's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_unflatten
from mlx_lm.models.switch_layers import (
    QuantizedSwitchLinear,
    SwitchGLU,
    SwitchLinear,
    SwitchMLP,
    _gather_sort,
    _scatter_unsort,
)

from gateway.engines.experts.bank import ExpertBank, FileReader, ProjectionSource
from gateway.engines.experts.plan import ExpertPlan
from gateway.engines.experts.policy import make_policy
from gateway.engines.experts.safetensors_index import TensorLocation, index_folder
from gateway.engines.experts.stats import ExpertStats


class StreamedSwitch(nn.Module):
    """A switch module whose experts live in an ``ExpertBank``; called as the original."""

    def __init__(self, inner: nn.Module, bank: ExpertBank) -> None:
        super().__init__()
        self.inner = inner  # the original SwitchGLU/SwitchMLP, with the bank's projections
        self._bank = bank  # not an array, list or dict: outside the parameter tree

    @property
    def bank(self) -> ExpertBank:
        return self._bank

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        # The one synchronisation streaming needs: which experts this step routes to.
        ids = np.array(indices.astype(mx.int32))
        needed = np.unique(ids)
        bank = self._bank
        if needed.size <= bank.slots:
            bank.ensure(needed.tolist())
            return self.inner(x, mx.array(bank.slot_of[ids]))
        return self._waves(x, ids, needed)

    def _waves(self, x: mx.array, ids: np.ndarray, needed: np.ndarray) -> mx.array:
        bank = self._bank
        k = ids.shape[-1]
        pairs = ids.reshape(-1)
        tokens = x.reshape(-1, x.shape[-1])
        resident = bank.slot_of[needed] >= 0
        ordered = np.concatenate([needed[resident], needed[~resident]])
        outputs: list[mx.array] = []
        positions: list[np.ndarray] = []
        for start in range(0, ordered.size, bank.slots):
            wave = ordered[start : start + bank.slots]
            bank.ensure(wave.tolist())
            chosen = np.nonzero(np.isin(pairs, wave))[0]
            rows = tokens[mx.array(chosen // k)]
            slots = mx.array(bank.slot_of[pairs[chosen]])[:, None]
            out = _forward(self.inner, rows, slots, sort=ids.size >= _SORT_MIN)[:, 0, :]
            mx.eval(out)  # before the next wave evicts what it used
            outputs.append(out)
            positions.append(chosen)
        order = np.argsort(np.concatenate(positions), kind="stable")
        merged = mx.concatenate(outputs, axis=0)[mx.array(order)]
        return merged.reshape(*ids.shape, merged.shape[-1])


# mlx-lm's SwitchGLU sorts the pairs by expert from this many on, and the products of sorted
# pairs are computed per expert as matrix products (not row by row): a wave computes its
# pairs the way the whole step would have, so the results are the same to the bit.
_SORT_MIN = 64


def _forward(inner: nn.Module, x: mx.array, indices: mx.array, sort: bool) -> mx.array:
    """mlx-lm's ``SwitchGLU``/``SwitchMLP.__call__`` with the sorting decided by the caller."""
    x = mx.expand_dims(x, (-2, -3))
    shape = indices.shape
    inv_order = None
    if sort:
        x, indices, inv_order = _gather_sort(x, indices)
    if isinstance(inner, SwitchGLU):
        x_up = inner.up_proj(x, indices, sorted_indices=sort)
        x_gate = inner.gate_proj(x, indices, sorted_indices=sort)
        x = inner.down_proj(inner.activation(x_up, x_gate), indices, sorted_indices=sort)
    else:
        x = inner.fc1(x, indices, sorted_indices=sort)
        x = inner.fc2(inner.activation(x), indices, sorted_indices=sort)
    if inv_order is not None:
        x = _scatter_unsort(x, inv_order, shape)
    return x.squeeze(-2)


_SWITCH_MODULES = (SwitchGLU, SwitchMLP)
_PROJECTIONS = (SwitchLinear, QuantizedSwitchLinear)


def install(
    model: nn.Module, folder: Path, plan: ExpertPlan, mode: str, stats: ExpertStats
) -> list[ExpertBank]:
    """Swap every switch module of a lazily loaded ``model`` for a ``StreamedSwitch``."""
    index = index_folder(folder)
    on_cpu = mx.default_device() == mx.cpu
    reader = FileReader()
    replaced: list[tuple[str, nn.Module]] = []
    banks: list[ExpertBank] = []
    for path, module in model.named_modules():
        if not isinstance(module, _SWITCH_MODULES):
            continue
        sources = {
            name: _source(f"{path}.{name}", child, index)
            for name, child in module.children().items()
            if isinstance(child, _PROJECTIONS)
        }
        bank = ExpertBank(
            path,
            sources,
            min(plan.slots, plan.experts),
            mode,
            on_cpu,
            make_policy(plan.policy),
            stats,
            reader,
        )
        for name, projection in bank.modules.items():
            setattr(module, name, projection)  # the stacked (lazy, unread) arrays are dropped
        replaced.append((path, StreamedSwitch(module, bank)))
        banks.append(bank)
    if not replaced:
        raise ValueError(f"{folder}: no mixture-of-experts layer to stream")
    model.update_modules(tree_unflatten(replaced))
    return banks


def _source(prefix: str, module: Any, index: dict[str, TensorLocation]) -> ProjectionSource:
    """The file locations of one projection; refuses a model whose experts the loader
    transformed (their bytes in the file would not be the module's)."""

    def located(key: str) -> TensorLocation | None:
        if module.get(key) is None:
            return None
        name = f"{prefix}.{key}"
        location = index.get(name)
        if location is None or location.shape != tuple(module[key].shape):
            raise ValueError(
                f"{name}: not stored stacked as the model uses it (convert the model with "
                "mlx_lm.convert to stream its experts)"
            )
        return location

    weight = located("weight")
    assert weight is not None
    if isinstance(module, QuantizedSwitchLinear):
        if module.get("global_scale") is not None:
            raise ValueError(f"{prefix}: quantization with a global scale cannot be streamed")
        return ProjectionSource(
            weight,
            located("scales"),
            located("biases"),
            located("bias"),
            module.group_size,
            module.bits,
            module.mode,
        )
    return ProjectionSource(weight, bias=located("bias"))
