"""lm-evaluation-harness (0.4.x) model ``ppl-tok``: multiple-choice tasks scored by ppl-tok.

Importing this module registers the model ``ppl-tok`` with lm-eval. lm-eval
0.4 has no plugin discovery for models (no entry point group; its registry is
filled from a fixed table), so the plain ``lm_eval`` command cannot see it.
Run lm-eval's own CLI through ``ppl-tok-lm-eval`` (or
``python -m ppl_tok.integrations.lm_eval``), which registers the model first::

    ppl-tok-lm-eval --model ppl-tok \\
        --model_args model=smollm2-135m,scoring=importance,num_samples=64,device=cpu \\
        --tasks TASK [--include_path FOLDER] [--limit 100]

or, in Python, ``import ppl_tok.integrations.lm_eval`` before
``lm_eval.simple_evaluate(model="ppl-tok", ...)``.

Model arguments (``--model_args key=value,...``):

* ``model``: a card name, a local folder or a hub id (:func:`ppl_tok.lm.cards.load_lm`);
  ``device``, ``dtype``, ``bos_id`` as there; ``backend``: the LM backend
  (:mod:`ppl_tok.lm.backends`, default ``transformers``). Together they make the
  :class:`~ppl_tok.lm.spec.LMSpec` that is loaded and recorded in lm-eval's results
  (``ppl_tok_lm``). ``lm``: an already built :class:`~ppl_tok.lm.base.LanguageModel`
  (Python API only; its ``spec`` is recorded, if it has one).
* ``scoring`` (one of :mod:`ppl_tok.scorings`'s table): what ``loglikelihood`` returns for a
  (context, continuation) request:

  - ``canonical``: ``log p(v* | c)``, the tokenizer's own tokenization ``v*``;
  - ``importance``: the importance-sampling estimate of ``log p(x | c)``, summed
    over every tokenization of the continuation ``x`` (``num_samples`` look-ahead particles);
    ``marginal`` is its old name;
  - ``mixture``: ``log(alpha P_can + (1 - alpha) P_non)``, the paper's mixture
    of the canonical and non-canonical answer distributions of a question
    (:func:`ppl_tok.scorings.classify.mixture_scores`; needs all answers of a document in one call,
    which lm-eval does); ``alpha`` (default 0.5);
  - ``canonical+rest``: ``log(p(v* | c) + m)``, the canonical term exact plus the
    unbiased estimate ``m`` of the non-canonical mass from ``num_samples`` particles
    (:func:`ppl_tok.scorings.classify.canonical_plus_rest_scores`; never below ``canonical``);
  - ``exact``: the midpoint of a certified bracket of ``log p(x | c)``
    (``tolerance`` nats, ``budget`` LM forwards per answer);
  - ``stratified``: the stratified estimate of ``log p(x | c)``;
  - ``conditional``: ``log p(x | c)`` over strings, free of the prompt boundary, its certified
    interval logged per request (:mod:`ppl_tok.scorings.conditional`); ``prefill``
    (``canonical-head``, ``exact`` or ``auto``) says how the context is conditioned on;
    ``extend_threshold``: the beam's lazy extension (default
    :data:`~ppl_tok.integrations.lm_eval_strings.EXTEND_THRESHOLD`, ``0`` under ``prefill=exact``; ``0``: exhaustive);
    ``event``: ``boundary`` (default: the continuation then a boundary character or the end) or ``prefix``
    (the output after the context begins with the continuation); ``search``: ``walk`` (default) or ``tree``
    (the token tree's estimand, :mod:`ppl_tok.strings.conditional_tree`).
    Under ``loglikelihood_rolling`` it is the ``prefix`` scoring (the document as a prefix of the
    output after BOS: the conditional with an empty context).
* ``generate_until`` (generation tasks): the continuation drawn from the LM over strings after the
  context as a string, whatever ``scoring`` is; the budget is ``max_gen_toks x gen_bytes_per_token``
  bytes (default 4 per token; :mod:`ppl_tok.integrations.lm_eval_strings`).
* ``proposal``, ``proposal_file``: the importance proposal, any registered one (:data:`ppl_tok.proposals.PROPOSALS`:
  ``lookahead``, ``uniform``, ``prior``, ``stratified``, a user's own), or ``learned`` with its ``learn-proposal`` file.
  A proposal's own parameters (:attr:`ppl_tok.proposals.Proposal.params`) are ``proposal_NAME=VALUE``.
* ``seed``, ``split``, ``id_field``: the particles of request (document ``d``,
  choice ``j``) use the seed :func:`ppl_tok.common.seeds.pair_seed` ``(seed, split, id, j)``,
  ``id = d[id_field]`` if the document has that field, else lm-eval's ``doc_id``,
  and ``split = d["split"]`` if the document has it, else the ``split``
  argument (default ``"test"``). This is the seed ``ppl-tok qa run`` gives the
  same pair, so both give the same per-request numbers (the tasks written by
  :func:`write_tasks` carry the ids and splits of ``qa run``).
* ``batch_size``: requests per batched engine run (default 32; ``auto``: 32).
* ``threads``: torch's CPU threads (default: ``$OMP_NUM_THREADS`` if set, else 1: :mod:`ppl_tok.lm.threads`, the
  same default as ``ppl-tok --threads`` and :func:`ppl_tok.lm.cards.load_lm`).
* ``max_length``, ``beam``, ``prune``: perplexity tasks (``loglikelihood_rolling``,
  scorings ``canonical``, ``beam``, ``prefix``, ``with-end``, ``canonical+rest``; :mod:`ppl_tok.perplexity`; the old name
  ``marginal`` means ``beam`` there): the window in positions (default: the model's context
  length, as ``hf``), and the byte-synchronous beam of ``beam`` (default: the ``beam`` scoring's own,
  :class:`~ppl_tok.scorings.beam.BeamParams`, lazy extension as ``ppl-tok perplexity``).
* every registered scoring's own parameters by field name (:attr:`ppl_tok.scorings.Scoring.params`;
  :mod:`ppl_tok.integrations.lm_eval_params`), with their Python and command-line defaults: a scoring of your own
  takes ``scoring=mine,its_param=V``.

Conventions, as lm-eval's ``hf`` model: trailing whitespace of the context moves
to the continuation; an empty context is BOS alone. Unlike ``hf`` (which
encodes ``context + continuation`` and splits), the context and the
continuation are tokenized separately, as everywhere in ppl-tok; with
byte-level BPE models (SmolLM2, GPT-2, Llama 3) the two agree whenever the
continuation starts with a space (``conditional`` tokenizes neither apart). ``is_greedy`` is
``conditional``'s greedy byte decoding under its event, and ``False`` under the other scorings (only
``acc``/``acc_norm`` of multiple-choice tasks are meaningful there). Perplexity
tasks use lm-eval's rolling windows over the canonical tokens, conditioned on
BOS first (``hf`` with ``prefix_token_id`` = the card's BOS).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import Any

try:
    import lm_eval.models  # noqa: F401 - lm-eval's own models first: get_model() fills only an empty registry
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("ppl_tok.integrations.lm_eval needs lm-evaluation-harness 0.4: "
                      "pip install 'ppl-tok[lm-eval]'") from err


from ppl_tok.common.seeds import pair_seed
from ppl_tok.integrations.lm_eval_tasks import TASK_PREFIX, write_hf_tokenizer, write_tasks  # noqa: F401 - re-exported
from ppl_tok.integrations.lm_eval_tasks import _write_tasks_main
from ppl_tok.lm.spec import DEFAULT_BACKEND, DEFAULT_MODEL, DTYPES, LMSpec
from ppl_tok.limits import MAX_SEED
from ppl_tok.scorings import DOCUMENT, PAIR, Pair, PairScore, ScoringConfig, accepted, is_defined, names, scoring as find_scoring
from ppl_tok.integrations.lm_eval_params import (OLD_NAMES, ModelArgumentError, checked_parameters,  # noqa: F401
                                                 scoring_parameters)
from ppl_tok.scorings.conditional import ConditionalParams
from ppl_tok.scorings.registry import proposal_value
from ppl_tok.scorings.results import checked_scores
from ppl_tok.proposals import proposal_settings
from ppl_tok.strings.boundary import move_trailing_space  # noqa: F401 - re-exported
from ppl_tok.integrations.lm_eval_strings import BYTES_PER_TOKEN
from ppl_tok.strings.beam import StringSearchConfig

MODEL_NAME = "ppl-tok"
DEFAULT_BATCH = 32


def request_pair(request: Any, *, seed: int, split: str = "test", id_field: str = "id") -> Pair:
    """The :class:`Pair` of an lm-eval ``Instance`` (``args = (context, continuation)``).

    The seed is ``pair_seed(seed, split, id, choice)`` with ``id = doc[id_field]``
    (else lm-eval's ``doc_id``) and ``split = doc["split"]`` (else ``split``).
    """
    context, cont = request.args[0], request.args[1]
    doc = request.doc if isinstance(request.doc, dict) else {}
    qid = str(doc[id_field]) if id_field in doc else str(request.doc_id)
    split = str(doc.get("split", split))
    context, cont = move_trailing_space(context, cont)
    choice = int(request.idx)
    return Pair(context, cont, pair_seed(seed, split, qid, choice), (request.task_name, request.doc_id), choice)


def _int_arg(name: str, value: Any, low: int, high: int | None = None) -> int:
    """A model argument that must be an integer in ``low..high`` (lm-eval passes ``2.5`` as a float, ``x`` as a str)."""
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelArgumentError(f"{name}={value!r}: expected an integer")
    if value < low or (high is not None and value > high):
        raise ModelArgumentError(f"{name}={value}: expected an integer "
                                 f"{f'>= {low}' if high is None else f'in {low}..{high}'}")
    return value


def _as_batch(batch_size: Any) -> int:
    auto = batch_size in (None, "auto") or str(batch_size).startswith("auto")
    return DEFAULT_BATCH if auto else _int_arg("batch_size", batch_size, 1)


def chunks(pairs: Sequence[Pair], size: int, whole_groups: bool = False) -> Iterator[list[int]]:
    """Indices of ``pairs`` in runs of at most ``size`` (more if one group is larger), groups kept whole if asked."""
    if not whole_groups:
        for lo in range(0, len(pairs), size):
            yield list(range(lo, min(lo + size, len(pairs))))
        return
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, p in enumerate(pairs):
        groups.setdefault(p.group, []).append(i)
    run: list[int] = []
    for members in groups.values():
        if run and len(run) + len(members) > size:
            yield run
            run = []
        run.extend(members)
    if run:
        yield run


def model_arguments() -> set[str]:
    """Every name ``--model_args`` takes: the model's own arguments, the scorings' parameters and their old names."""
    return model_own_arguments() | set(scoring_parameters()) | set(OLD_NAMES)


def model_own_arguments() -> set[str]:
    """The model's own arguments (:class:`PPLTokLM`'s, beside the scorings' parameters)."""
    import inspect

    return set(inspect.signature(PPLTokLM.__init__).parameters) - {"self", "params"}


def _own(cls: type, name: str, values: dict[str, Any]) -> Any:
    """The parameters of ``cls`` from those of ``values`` it declares (a cross-field error as one line)."""
    from ppl_tok.common.params import split_values

    try:
        return cls(**split_values(cls, values)[0])
    except ValueError as err:
        raise ModelArgumentError(f"scoring={name}: {err}") from None


def _config(found: Any, level: str, window: int | None, values: dict[str, Any]) -> ScoringConfig:
    """The :class:`ScoringConfig` of the scoring ``found`` at ``level``: its own parameters from ``values``."""
    return ScoringConfig(found.name, window=window, level=level, params=_own(found.params, found.name, values))


@register_model(MODEL_NAME)
class PPLTokLM(LM):
    """lm-eval model scoring ``loglikelihood`` requests with ppl-tok (see the module docstring)."""

    def __init__(self, model: str = DEFAULT_MODEL, scoring: str = "canonical", seed: int = 0, split: str = "test",
                 id_field: str = "id", device: str | None = None, dtype: str | None = None, bos_id: int | None = None,
                 batch_size: int | str | None = DEFAULT_BATCH, max_batch_size: int | None = None,
                 max_length: int | None = None, lm: Any = None, backend: str = DEFAULT_BACKEND,
                 gen_bytes_per_token: int = BYTES_PER_TOKEN, proposal: str = "lookahead",
                 proposal_file: str | None = None, threads: int | None = None, **params: Any) -> None:
        """``params``: the scorings' own parameters (:func:`scoring_parameters`), by field name or old name
        (:data:`OLD_NAMES`); each is checked by its field and given to the chosen scorings that declare it."""
        super().__init__()
        if not (is_defined(scoring, PAIR) or is_defined(scoring, DOCUMENT)):
            known = dict.fromkeys(accepted(PAIR) + accepted(DOCUMENT))
            raise ModelArgumentError(f"scoring={scoring!r}: unknown scoring; ppl-tok supports "
                                     f"scoring={'|'.join(known)} (marginal: the old name of importance for "
                                     "loglikelihood and of beam for loglikelihood_rolling)")
        self.scoring = scoring
        pair = find_scoring(scoring, PAIR) if is_defined(scoring, PAIR) else None
        document = find_scoring(scoring, DOCUMENT) if is_defined(scoring, DOCUMENT) else None
        if document is None and pair is not None and pair.rolling is not None:  # e.g. conditional: prefix
            document = find_scoring(pair.rolling, DOCUMENT)
        #: the scoring of ``loglikelihood`` and of ``loglikelihood_rolling`` (``None``: not defined there)
        self.pair_scoring = None if pair is None else pair.name
        self.document_scoring = None if document is None else document.name
        self.seed = _int_arg("seed", seed, 0, MAX_SEED)
        own = {k.removeprefix("proposal_"): params.pop(k) for k in list(params) if k.startswith("proposal_")}
        try:  # the proposal field's value: None for the plain look-ahead (the field's default); its parameters proposal_NAME=
            own_proposal = proposal_value(str(proposal), None if proposal_file is None else str(proposal_file), own)
        except ValueError as err:
            raise ModelArgumentError(str(err)) from err
        #: the importance proposal's record (ppl_tok.proposals.proposal_settings)
        self.proposal = own_proposal or proposal_settings()
        self.split, self.id_field = str(split), str(id_field)
        from ppl_tok.lm.threads import default_cpu_threads, set_cpu_threads

        #: torch's CPU threads (``threads``, else the one default of :mod:`ppl_tok.lm.threads`, as ``ppl-tok``'s)
        self.threads = default_cpu_threads() if threads is None else set_cpu_threads(_int_arg("threads", threads, 1))
        self.batch = _as_batch(batch_size)
        if max_batch_size is not None:
            self.batch = min(self.batch, _int_arg("max_batch_size", max_batch_size, 1))
        if dtype is not None and dtype not in DTYPES:
            raise ModelArgumentError(f"dtype={dtype!r}: expected one of {', '.join(DTYPES)}")
        bos_id = None if bos_id is None else _int_arg("bos_id", bos_id, 0)
        self.max_length = None if max_length is None else _int_arg("max_length", max_length, 2)
        values = checked_parameters(params, model_own_arguments())
        values.update(seed=self.seed, proposal=own_proposal)  # shared: the requests' seeds, the proposal
        #: the scorings' configs: of ``loglikelihood`` and of ``loglikelihood_rolling`` (``None``: not defined)
        self.pair_config = None if pair is None else _config(pair, PAIR, self.max_length, values)
        self.document_config = None if document is None else _config(document, DOCUMENT, self.max_length, values)
        #: the byte-synchronous beam of the document scoring (``beam``, ``prefix``, ``with-end``; else ``None``)
        self.search = getattr(self.document_config, "search", None) if self.document_config else None
        #: the LM over strings of ``conditional`` (its parameters' defaults: ``ConditionalParams``, the same in
        #: Python) and, without lazy extension, of ``generate_until`` (the context under ``prefill``)
        conditional = _own(ConditionalParams, "conditional", values)
        self.conditional = conditional.search
        self.strings = StringSearchConfig(beam=conditional.beam, prune=conditional.prune, prefill=conditional.prefill)
        #: ``conditional``'s event (:data:`~ppl_tok.strings.conditional.EVENTS`)
        self.event = conditional.event
        self.gen_bytes_per_token = _int_arg("gen_bytes_per_token", gen_bytes_per_token, 1)
        #: the certified interval of every request scored where the scoring gives one (``conditional``, ``exact``), in order
        self.intervals: list[tuple[float, float]] = []
        if lm is None:
            from ppl_tok.lm.cards import load_lm

            try:
                lm = load_lm(LMSpec(model=str(model), backend=str(backend), dtype=dtype, bos_id=bos_id,
                                    device=None if device is None else str(device)))
            except (ValueError, LookupError, OSError) as err:
                raise ModelArgumentError(f"model={model!r}: {err}") from err
        self.lm = lm
        #: the LM's identity (recorded in lm-eval's results as ``ppl_tok_lm``); ``None``: an LM built in Python
        self.spec: LMSpec | None = getattr(lm, "spec", None)
        self.model_name = str(getattr(lm, "name", model))

    # ------------------------------------------------------------------ lm-eval API
    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict[str, Any] | None = None) -> PPLTokLM:
        """From ``--model_args``; see :meth:`create_from_arg_obj` for ``--device`` and ``--batch_size``."""
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict[str, Any] | None = None
                            ) -> PPLTokLM:
        """``--model_args`` win over lm-eval's own ``--device``/``--batch_size``/``--max_batch_size``.

        lm-eval's CLI passes ``device="cuda:0"`` when ``--device`` is not given;
        on a machine without CUDA that default is dropped (the model stays on the CPU).
        """
        known = model_arguments()
        unknown = sorted(set(arg_dict) - known)
        if unknown:
            raise ModelArgumentError(f"unknown model argument {unknown[0]!r}: expected some of "
                                     f"{', '.join(sorted(known - {'lm'}))}")
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        device = extra.get("device")
        if device is not None and str(device).startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                del extra["device"]
        return cls(**arg_dict, **extra)

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(score, is_greedy)`` per request, the score as chosen by ``scoring``; batched on the engine.
        ``is_greedy`` is ``conditional``'s (greedy byte decoding writes the continuation, and under
        ``event=boundary`` then a boundary or the end); ``False`` under the other scorings."""
        pairs = [request_pair(r, seed=self.seed, split=self.split, id_field=self.id_field) for r in requests]
        return [(s.estimate, bool(s.greedy)) for s in self.pair_scores(pairs, progress=not disable_tqdm)]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """The log-likelihood of each document (perplexity tasks), by :mod:`ppl_tok.perplexity`.

        ``canonical``: lm-eval's rolling windows over the canonical tokens (what
        its ``hf`` model computes); ``beam`` (old name ``marginal``): the byte-synchronous beam's sum
        over tokenizations (a certified floor: :func:`ppl_tok.strings.string_marginal`;
        the importance estimate of ``loglikelihood`` does not scale to whole
        documents); ``prefix`` and ``with-end``: the probability that the output starts with the
        document, or is exactly it (the end in the last window; :func:`ppl_tok.scorings.events.event_scores`);
        ``canonical+rest``: the canonical term plus the importance estimate of the rest. An empty document
        scores 0, as with ``hf``.
        """
        from tqdm.auto import tqdm

        from ppl_tok.perplexity import corpus_from_texts, score_documents

        if self.document_scoring is None:
            raise NotImplementedError(
                f"loglikelihood_rolling (perplexity tasks) is defined for scoring={'|'.join(names(DOCUMENT))}, "
                f"not {self.scoring!r}")
        texts = [str(r.args[0]) for r in requests]
        config = self.document_config
        out = [0.0] * len(texts)
        todo = [i for i, t in enumerate(texts) if t]
        with tqdm(total=len(todo), desc=f"ppl-tok rolling {self.document_scoring}", unit="doc",
                  disable=disable_tqdm) as bar:
            for lo in range(0, len(todo), self.batch):
                idx = todo[lo: lo + self.batch]
                corpus = corpus_from_texts([texts[i] for i in idx], source="lm-eval request")
                for i, score in zip(idx, score_documents(self.lm, corpus.documents, config)):
                    out[i] = score.log_likelihood
                bar.update(len(idx))
        return out

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Each request's continuation from the LM over strings (:func:`~ppl_tok.integrations.lm_eval_strings.generate_until`)."""
        from ppl_tok.integrations.lm_eval_strings import generate_until

        return generate_until(self.lm, requests, self.strings, seed=self.seed,
                              bytes_per_token=self.gen_bytes_per_token, progress=not disable_tqdm)

    def get_model_info(self) -> dict[str, Any]:
        """Recorded in lm-eval's results ``config``."""
        from ppl_tok.common.params import settings

        own = {c.scoring: settings(c.params) for c in (self.pair_config, self.document_config) if c is not None}
        return {"ppl_tok_model": self.model_name, "ppl_tok_scoring": self.scoring, "ppl_tok_params": own,
                "ppl_tok_num_samples": next((p["num_samples"] for p in own.values() if "num_samples" in p), None),
                "ppl_tok_seed": self.seed,
                "ppl_tok_prefill": self.strings.prefill, "ppl_tok_proposal": self.proposal,
                "ppl_tok_extend_threshold": self.conditional.extend_threshold, "ppl_tok_event": self.event,
                "ppl_tok_lm": None if self.spec is None else self.spec.to_dict()}

    # ------------------------------------------------------------------ scoring
    def score_pairs(self, pairs: Sequence[Pair], progress: bool = False) -> list[float]:
        """The score of every pair, in batches of ``batch_size`` requests (a question's answers kept together:
        ``mixture`` normalises over them), by the scoring's :meth:`~ppl_tok.scorings.Scoring.score_pairs`."""
        return [s.estimate for s in self.pair_scores(pairs, progress)]

    def pair_scores(self, pairs: Sequence[Pair], progress: bool = False) -> list[PairScore]:
        """:meth:`score_pairs` with each request's interval and ``greedy`` (:class:`~ppl_tok.scorings.PairScore`)."""
        from tqdm.auto import tqdm

        if self.pair_scoring is None:
            raise NotImplementedError(f"loglikelihood is defined for scoring={'|'.join(names(PAIR))}, not "
                                      f"{self.scoring!r} (a scoring of perplexity tasks only)")
        config = self.pair_config
        implementation = config.implementation
        out: list[PairScore] = [PairScore(0.0)] * len(pairs)
        with tqdm(total=len(pairs), desc=f"ppl-tok {self.pair_scoring}", unit="req", disable=not progress) as bar:
            for idx in chunks(pairs, self.batch, whole_groups=True):
                scores = implementation.score_pairs(self.lm, [pairs[i] for i in idx], config)
                for i, s in zip(idx, checked_scores(implementation.name, scores, len(idx), PairScore, "pairs")):
                    out[i] = s
                    if s.lower is not None and s.upper is not None:
                        self.intervals.append((s.lower, s.upper))
                bar.update(len(idx))
        return out


def _check_model_args(argv: list[str]) -> None:
    """The ``ppl-tok`` model's ``--model_args`` checked before lm-eval reads its task index (about 20 s of CPU), so
    that a bad value fails at once; the model is still built, and loaded, by lm-eval afterwards."""
    from lm_eval.utils import simple_parse_args_string

    model, args = None, []
    for i, arg in enumerate(argv):
        flag, eq, inline = arg.partition("=")
        values = [inline] if eq else list(itertools.takewhile(lambda a: not a.startswith("-"), argv[i + 1:]))
        if flag in ("--model", "-M", "-m") and values:
            model = values[0]
        elif flag in ("--model_args", "-a"):
            args.extend(values)
    if model == MODEL_NAME and args:
        PPLTokLM.create_from_arg_obj({**simple_parse_args_string(",".join(args)), "lm": object()})  # not loaded


def cli(argv: list[str] | None = None) -> None:
    """``ppl-tok-lm-eval``: lm-eval's own command line with the ``ppl-tok`` model registered.

    ``ppl-tok-lm-eval write-tasks ...`` writes tasks over local data
    (:func:`ppl_tok.integrations.lm_eval_tasks.write_tasks`).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = "ppl-tok-lm-eval"
    try:
        if argv[:1] == ["write-tasks"]:
            prog += " write-tasks"
            _write_tasks_main(argv[1:])
            return
        _check_model_args(argv)
        from lm_eval.__main__ import cli_evaluate

        sys.argv = ["lm_eval", *argv]
        cli_evaluate()
    except ModelArgumentError as err:
        print(f"{prog}: error: --model_args: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)
    except (ValueError, LookupError, OSError) as err:
        if argv[:1] != ["write-tasks"]:
            raise  # lm-eval's own errors: its own messages
        print(f"{prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    cli()
