"""The ``ppl-tok`` lm-eval model's arguments that are the scorings' own parameters (:mod:`ppl_tok.common.params`):
which names ``--model_args`` takes beside the model's own, and each value checked by its field."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ppl_tok.scorings.registry import check_limits


class ModelArgumentError(ValueError):
    """A bad ``--model_args`` value (``ppl-tok-lm-eval`` prints it as one line, exit status 2)."""


#: Old model-argument names of scoring parameters: ``tolerance`` and ``budget`` are the exact search's.
OLD_NAMES = {"tolerance": "exact_tolerance", "budget": "exact_budget"}
#: Model-argument names of scoring parameters that differ from the field's: ``search=tree`` is the conditional's
#: ``searcher`` (the field cannot be ``search``, the whole search of :class:`~ppl_tok.scorings.SearchParams`).
SHORT_NAMES = {"search": "searcher"}
#: Model arguments the model reads itself, not a scoring's parameters (``params`` of :class:`PPLTokLM`).
_SHARED = ("seed", "proposal")
#: The scoring parameters whose memory limits (``ppl_tok.limits``) ``--model_args`` are checked against, as before
#: the parameters were the scorings' own (the beam's width and pruning are not: lm-eval runs take wide beams).
LIMITED = ("num_samples", "exact_budget")


def scoring_parameters() -> dict[str, Any]:
    """Every registered scoring's parameters by field name (the first scoring's field of each name, which checks
    a value): what ``--model_args`` takes besides the model's own arguments."""
    from ppl_tok.common.params import specs
    from ppl_tok.scorings.registry import SCORINGS

    out: dict[str, Any] = {}
    for s in SCORINGS.values():
        for spec in specs(s.params):
            if spec.name not in _SHARED:
                out.setdefault(spec.name, spec)
    return out


def checked_parameters(params: dict[str, Any], own: Iterable[str] = ()) -> dict[str, Any]:
    """``params`` (model arguments, strings or lm-eval's parsed values) by field name, each checked by its field
    (``own``: the model's own arguments, named in the error of an unknown one).

    :raises ModelArgumentError: a name that is no scoring's parameter, or a bad value (``name=value: why``).
    """
    from ppl_tok.common.params import ParamValueError, value_of

    known = scoring_parameters()
    out = {}
    for given, value in params.items():
        name = {**OLD_NAMES, **SHORT_NAMES}.get(given, given)
        if name not in known:
            raise ModelArgumentError(f"unknown model argument {given!r}: expected some of "
                                     f"{', '.join(sorted((set(own) | set(known) | set(OLD_NAMES) | set(SHORT_NAMES)) - {'lm'}))}")
        try:
            out[name] = value_of(known[name], value)
        except ParamValueError as err:  # the value is in the message already: the type's ", got ..." left out
            raise ModelArgumentError(f"{given}={value!r}: {err.reason.rsplit(', got ', 1)[0]}") from None
    check_limits([known[n] for n in LIMITED], out,
                 lambda spec: {v: k for k, v in OLD_NAMES.items()}.get(spec.name, spec.name))
    return out


__all__ = ["LIMITED", "OLD_NAMES", "SHORT_NAMES", "ModelArgumentError", "checked_parameters", "scoring_parameters"]
