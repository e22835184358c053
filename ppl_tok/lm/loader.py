"""An LM built where it is used: a picklable loader of an :class:`~ppl_tok.lm.spec.LMSpec`, for Ray actors."""

from __future__ import annotations

from dataclasses import dataclass

from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.spec import DEFAULT_BACKEND, LMSpec


@dataclass(frozen=True)
class LMLoader:
    """Loads the LM inside an actor: :func:`~ppl_tok.lm.cards.load_lm` of :meth:`spec`, on the actor's GPU
    if Ray gave it one and no device is named."""

    model: str
    device: str | None = None
    dtype: str | None = None
    bos_id: int | None = None
    backend: str = DEFAULT_BACKEND

    @classmethod
    def from_spec(cls, spec: LMSpec) -> LMLoader:
        """The loader of ``spec`` (its device ``None``: the actor's GPU, if it has one)."""
        return cls(spec.model, spec.device, spec.dtype, spec.bos_id, spec.backend)

    def spec(self, device: str | None = None) -> LMSpec:
        """The LM as an :class:`~ppl_tok.lm.spec.LMSpec` (``device``: the loader's, else this one)."""
        return LMSpec(model=self.model, backend=self.backend, device=self.device or device, dtype=self.dtype,
                      bos_id=self.bos_id)

    def __call__(self) -> LanguageModel:
        from ppl_tok.common.heap import tune_heap
        from ppl_tok.lm.cards import load_lm

        tune_heap()  # an actor's process, as the CLI's (docs/limits.md)
        device = None
        if self.device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else None  # Ray sets CUDA_VISIBLE_DEVICES per actor
        return load_lm(self.spec(device))
