"""The capture key policy: which calls share a capture, and when a capture is made again.

A capture is bound to the shapes of the inputs it copies or mutates and to the addresses of the
parameters it reads in place (a device graph reads fixed addresses). So a call's key is
(the shapes of its user and mutated inputs, the addresses of its parameters): a call whose key
was captured replays that capture. Scalars at a shape position take part by value, an effect
token (an empty tensor AOT feeds as None) as None.

Keys of the same shapes with other parameters are captures of their own ("new parameters":
one code object serves every layer of a model Dynamo splits per layer). A capture is made again
(a *recapture*) when forced (``npugraphex_config.force_recapture``), when a mutated input that
it uses in place arrives at another address ("moved mutated input <i>"), or when a parameter it
was captured on was given new storage (``p.data = ...``: "moved parameter"), as TorchAir does.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

_SCALARS = (int, float, bool)


def _shape_reader(i: int, example: Any) -> Callable[[Sequence[Any]], Any]:
    if isinstance(example, torch.Tensor) and example.numel() == 0 and example.dim() == 1:
        # maybe an effect token (side-effect ops such as _linalg_check_errors): traced as an
        # empty tensor, fed as None at run time
        return lambda args: args[i].shape if args[i] is not None else None
    if isinstance(example, torch.Tensor):  # AOT feeds a tensor where it traced one
        return lambda args: args[i].shape
    return lambda args: args[i] if isinstance(args[i], _SCALARS) else None


class CaptureKey:
    """``key(args)``: the capture key of a call (module doc); ``name(key)``: how the capture
    report shows it; ``reason(...)``: why a capture is made."""

    def __init__(self, shape_indices: Sequence[int], ptr_indices: Sequence[int],
                 examples: Sequence[Any], force_recapture: bool = False):
        self.shape_indices = tuple(shape_indices)
        self.ptr_indices = tuple(ptr_indices)
        self.force_recapture = force_recapture
        self._names: Dict[Any, str] = {}
        plain = all(isinstance(examples[i], torch.Tensor) and not
                    (examples[i].numel() == 0 and examples[i].dim() == 1)
                    for i in self.shape_indices)
        shapes, ptrs = self.shape_indices, self.ptr_indices
        if plain and not ptrs:
            # the common case: tensors only, no parameter read in place
            if len(shapes) == 1:
                (only,) = shapes
                self.key = lambda args: ((args[only].shape,), ())
            else:
                self.key = lambda args: (tuple([args[i].shape for i in shapes]), ())
        elif plain and all(isinstance(examples[i], torch.Tensor) for i in ptrs):
            # parameters and buffers: tensors on every call (AOT's calling convention)
            self.key = lambda args: (tuple([args[i].shape for i in shapes]),
                                     tuple([args[i].data_ptr() for i in ptrs]))
        else:
            readers = tuple(_shape_reader(i, examples[i]) for i in shapes)
            self.key = lambda args: (tuple([read(args) for read in readers]),
                                     tuple([_ptr(args[i]) for i in ptrs]))

    def name(self, key) -> str:
        """The report's name of ``key``: its shapes (parameter addresses left out)."""
        found = self._names.get(key[0])
        if found is None:
            found = self._names[key[0]] = str(
                [tuple(s) if isinstance(s, torch.Size) else s for s in key[0]])
        return found

    def params_of(self, args: Sequence[Any]) -> Tuple[Tuple[weakref.ref, int], ...]:
        """(weak reference, address) of each parameter a capture on ``args`` reads in place."""
        return tuple((weakref.ref(args[i]), args[i].data_ptr()) for i in self.ptr_indices
                     if isinstance(args[i], torch.Tensor))

    def recapture_reason(self, pinned: Dict[int, int], args: Sequence[Any]) -> str:
        """Why a key captured with inputs ``pinned`` ({position: address} of the mutated
        inputs used in place) is captured again for ``args`` ("": it is not)."""
        if self.force_recapture:
            return "force_recapture"
        for i, ptr in pinned.items():
            if args[i].data_ptr() != ptr:
                return f"moved mutated input {i}"
        return ""

    @staticmethod
    def first_reason(key, captured: Dict[Any, Any], params_of: Callable[[Any], tuple]) -> Tuple[str, bool]:
        """(reason, recapture?) for a key not captured yet, given the keys ``captured`` (key ->
        entry) and ``params_of(entry)``: a parameter of a capture of the same shapes got new
        storage (a recapture), or new parameters, a new shape, the first capture."""
        same = [entry for k, entry in captured.items() if k[0] == key[0]]
        if any(params_moved(params_of(entry)) for entry in same):
            return "moved parameter", True
        if same:
            return "new parameters", False
        return ("new shape" if captured else "first capture"), False


def params_moved(params: Optional[tuple]) -> bool:
    """Whether a parameter in ``params`` ((weakref, address) pairs) now has other storage
    (``p.data = ...``), or is gone."""
    for ref, ptr in params or ():
        param = ref()
        if param is None or param.data_ptr() != ptr:
            return True
    return False


def _ptr(x: Any) -> Optional[int]:
    return x.data_ptr() if isinstance(x, torch.Tensor) else None
