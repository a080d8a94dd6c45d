"""The one runtime interface every GE executor implements."""
from __future__ import annotations

import abc
from typing import Any, List, Sequence


class GeRuntime(abc.ABC):
    """Loads one serialized GE ``ModelDef`` and runs it.

    ``load(model_bytes)`` is called once; ``run(inputs)`` takes one tensor per ``Data`` op (in
    ``index`` order; symbolic sizes as shape-[] int64 tensors) and returns one tensor per
    ``NetOutput`` input, in order.
    """

    name = "abstract"

    @abc.abstractmethod
    def load(self, model_bytes: bytes) -> None:
        ...

    @abc.abstractmethod
    def run(self, inputs: Sequence[Any]) -> List[Any]:
        ...
