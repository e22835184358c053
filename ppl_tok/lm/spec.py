"""Which LM, loaded how: the one value that names an LM everywhere (commands, studies, run folders).

An :class:`LMSpec` holds everything about the LM that can change a number: the model (a card, a local folder
or a hub id), the backend that loads it, the device, the dtype of the weights and the BOS id used for scoring.
Every command builds one from its LM argument group (:func:`ppl_tok.cli.common.add_lm_arguments`), every study
records ``spec.to_dict()`` in its run folder, and ``load_lm(spec)`` gives the :class:`~ppl_tok.lm.base.LanguageModel`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

DEFAULT_MODEL = "smollm2-135m"
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_BACKEND = "transformers"


@dataclass(frozen=True)
class LMSpec:
    """An LM and how it is loaded (validated on construction).

    ``device`` ``None`` is the CPU; ``dtype`` ``None`` is the card's (else float32); ``bos_id`` ``None`` is the
    card's (else the tokenizer's).
    """

    model: str = DEFAULT_MODEL
    backend: str = DEFAULT_BACKEND
    device: str | None = None
    dtype: str | None = None
    bos_id: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"LMSpec.model must be a model card, folder or hub id, got {self.model!r}")
        if not isinstance(self.backend, str) or not self.backend:
            raise ValueError(f"LMSpec.backend must be a backend name, got {self.backend!r}")
        if self.device is not None and (not isinstance(self.device, str) or not self.device):
            raise ValueError(f"LMSpec.device must be a device name such as 'cpu' or 'cuda:1', got {self.device!r}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"LMSpec.dtype must be one of {DTYPES} (or None: the card's), got {self.dtype!r}")
        if self.bos_id is not None and (isinstance(self.bos_id, bool) or not isinstance(self.bos_id, int)
                                        or self.bos_id < 0):
            raise ValueError(f"LMSpec.bos_id must be a token id >= 0 (or None: the card's), got {self.bos_id!r}")

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain JSON values (what run folders store)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMSpec:
        """The spec stored by :meth:`to_dict`; an unknown key is an error naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"LMSpec: unknown field(s) {unknown}; expected some of {sorted(known)}")
        return cls(**data)

    def options(self) -> dict[str, Any]:
        """``device``, ``dtype`` and ``bos_id`` as keyword arguments (of ``load_lm`` and the benchmarks)."""
        return {"device": self.device, "dtype": self.dtype, "bos_id": self.bos_id}

    def __str__(self) -> str:
        extra = [f"{k}={v}" for k, v in (("backend", self.backend if self.backend != DEFAULT_BACKEND else None),
                                         ("device", self.device), ("dtype", self.dtype), ("bos_id", self.bos_id))
                 if v is not None]
        return self.model + (f" ({', '.join(extra)})" if extra else "")


#: The settings of an LM that change a number, as every run folder records and compares them.
IDENTITY = ("model", "backend", "dtype", "device", "bos_id")
