"""Helpers below every command: reading the text, checking it, loading the LM from the flags, printing the result.

Every command module imports from here; this module imports no command (so the command line has no cycle).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ppl_tok.cli.proposals import add_proposal_arguments, proposal_names, proposal_record  # noqa: F401 (their home before)
from ppl_tok.common.arguments import POSITIVE, DeprecatedAlias, integer, positive, share
from ppl_tok.common.jsonout import to_json
from ppl_tok.lm.backends import backends, get_backend
from ppl_tok.lm.cards import load_lm, load_vocabulary
from ppl_tok.lm.spec import DEFAULT_BACKEND, DEFAULT_MODEL, DTYPES, LMSpec
from ppl_tok.lm.threads import DEFAULT_THREADS
from ppl_tok.limits import limits

STDIN = "-"


class Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (status 2). Subcommands' parsers are of this class too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Also ``flag_defaults``: each option's ``(dest, default)`` of the innermost (sub)command parsed, by
        its first option string, so that :func:`refuse_ignored` tells a flag given from one left alone."""
        ns, rest = super().parse_known_args(args, namespace)
        if not hasattr(ns, "flag_defaults"):
            ns.flag_defaults = {a.option_strings[0]: (a.dest, a.default) for a in self._actions if a.option_strings}
        return ns, rest


def given(args: argparse.Namespace, flag: str) -> bool:
    """Whether ``flag`` (e.g. ``--beam``) was given a value other than its default."""
    dest, default = args.flag_defaults[flag]
    return getattr(args, dest) != default


def refuse_ignored(args: argparse.Namespace, flags: Sequence[str], why: str, fix: str = "leave it out") -> None:
    """A flag that the run would silently ignore is an error, before the model loads: the first of ``flags``
    given (:func:`given`) is named with ``why`` (what ignores it) and ``fix`` (``FLAG`` in them: the flag)."""
    for flag in flags:
        if given(args, flag):
            raise ValueError(f"{flag} would be ignored: {why}; {fix}".replace("FLAG", flag))


# ------------------------------------------------------- argument groups
def device_name(text: str) -> str:
    """``--device``: a name torch knows (checked before the model loads; whether it exists here is checked by
    the loader, so a Ray driver without the workers' GPUs can still name them)."""
    from ppl_tok.lm.device import parse_device

    try:
        parse_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_lm_arguments(p: argparse.ArgumentParser, several: bool = False) -> None:
    """The one argument group that names an LM: ``--model``, ``--device``, ``--dtype``, ``--bos-id``, ``--backend``.

    :func:`lm_spec` turns the parsed flags into the :class:`~ppl_tok.lm.spec.LMSpec` that the command loads
    and its study records. ``several``: ``--model`` may be repeated (an ensemble; :func:`lm_specs`), the
    other flags applying to every LM.
    """
    g = p.add_argument_group("language model")
    if several:
        g.add_argument("--model", action="append", metavar="MODEL",
                       help=f"model card, local folder or hub id (default {DEFAULT_MODEL}); repeat it for an "
                            "ensemble of LMs over strings")
    else:
        g.add_argument("--model", default=DEFAULT_MODEL,
                       help=f"model card, local folder or hub id (default {DEFAULT_MODEL})")
    g.add_argument("--device", type=device_name, help="where the LM runs: cpu, cuda, cuda:1, mps (default: cpu)")
    g.add_argument("--dtype", choices=DTYPES, help="the LM's weights (default: the card's, else float32)")
    g.add_argument("--bos-id", type=integer(0), metavar="ID",
                   help="the BOS id used for scoring (default: the card's, else the tokenizer's pipeline; docs/models.md)")
    g.add_argument("--backend", metavar="NAME",
                   help=f"what loads the model: a registered backend ({', '.join(backends())}) or a loader as "
                        f"'module:function' (default {DEFAULT_BACKEND}; docs/lm.md, Backends)")
    g.add_argument("--threads", type=integer(1, 1024), metavar="N",
                   help=f"CPU threads of torch (default: $OMP_NUM_THREADS if set, else {DEFAULT_THREADS}; docs/lm.md)")


def set_threads(args: argparse.Namespace) -> int | None:
    """Set torch's CPU threads for a command that runs an LM (it has ``--threads``): ``--threads``, else
    ``$OMP_NUM_THREADS``, else :data:`DEFAULT_THREADS`. The number set, or ``None`` for a command without an LM."""
    if not hasattr(args, "threads"):
        return None
    from ppl_tok.lm.threads import set_cpu_threads

    return set_cpu_threads(args.threads)


def lm_spec(args: argparse.Namespace) -> LMSpec:
    """The :class:`~ppl_tok.lm.spec.LMSpec` of the flags of :func:`add_lm_arguments` (one ``--model``).

    ``--bos-id`` is checked against the model's vocabulary here, before any weights load.
    """
    if isinstance(args.model, list):
        specs = lm_specs(args)
        if len(specs) != 1:
            raise ValueError(f"{len(specs)} --model given where one LM is used: give one --model")
        return specs[0]
    _check_bos_id(args.model or DEFAULT_MODEL, args.bos_id)
    return plain_spec(LMSpec(model=args.model or DEFAULT_MODEL, backend=_backend(args), device=args.device,
                             dtype=args.dtype, bos_id=args.bos_id))


def plain_spec(spec: LMSpec) -> LMSpec:
    """``spec`` with what equals the default written as the default: a card named by its hub repo named by the
    card, a ``--dtype`` or ``--bos-id`` equal to the card's (``--dtype float32`` without a card) left out. The
    same LM spelled another way is then the same spec, and a rerun resumes its ``--out`` (the stores compare
    the model, dtype and BOS id as given)."""
    from dataclasses import replace

    from ppl_tok.lm.cards import list_cards

    if spec.backend != DEFAULT_BACKEND:
        return spec
    cards = list_cards()
    card = cards.get(spec.model) or next((c for c in cards.values() if c.repo and c.repo == spec.model), None)
    if card is None:
        return replace(spec, dtype=None) if spec.dtype == "float32" else spec
    return replace(spec, model=card.name, dtype=None if spec.dtype == card.dtype else spec.dtype,
                   bos_id=None if spec.bos_id is not None and spec.bos_id == card.bos_id else spec.bos_id)


def add_data_dir_argument(p: argparse.ArgumentParser, default: str, what: str) -> None:
    """``--data-dir`` (the folder of the data sets, as ``qa`` names it), ``--data`` its deprecated old name."""
    p.add_argument("--data-dir", "--data", dest="data", default=default, action=DeprecatedAlias, old=("--data",),
                   help=f"{what} (default {default}; --data is its deprecated old name)")


def transformers_backend_only(func: Any) -> Any:
    """``func(args)`` for a command that loads its models by name through the transformers backend (the
    benchmarks): another ``--backend`` is refused, not ignored."""
    def run(args: argparse.Namespace) -> Any:
        if getattr(args, "backend", None) not in (None, DEFAULT_BACKEND):
            raise ValueError(f"--backend {args.backend}: the benchmarks load their models through the "
                             f"{DEFAULT_BACKEND} backend only; drop --backend")
        return func(args)
    return run


def _backend(args: argparse.Namespace) -> str:
    """``--backend``, checked before any work: its loader must import (else one line naming it)."""
    name = getattr(args, "backend", None) or DEFAULT_BACKEND
    get_backend(name)
    return name


def lm_specs(args: argparse.Namespace) -> list[LMSpec]:
    """One :class:`~ppl_tok.lm.spec.LMSpec` per ``--model`` of :func:`add_lm_arguments` with ``several``."""
    models = args.model if isinstance(args.model, list) and args.model else [args.model or DEFAULT_MODEL]
    for model in dict.fromkeys(models):
        _check_bos_id(model, args.bos_id)
    backend = _backend(args)
    return [plain_spec(LMSpec(model=m, backend=backend, device=args.device, dtype=args.dtype, bos_id=args.bos_id))
            for m in models]


def _check_bos_id(model: str, bos_id: int | None) -> None:
    """``--bos-id`` against the model's vocabulary, where the vocabulary can be read without the weights (else the
    loader, which needs the model anyway, says what is wrong with it)."""
    if bos_id is not None:
        try:
            size = len(load_vocabulary(model))
        except (OSError, ValueError, LookupError):
            return
        if bos_id >= size:
            raise ValueError(f"--bos-id {bos_id} is not a token of {model} (ids 0..{size - 1}): give an id "
                             "below that, or drop --bos-id for the card's (else the tokenizer's) BOS")


def add_search_arguments(p: argparse.ArgumentParser, *, prefill: bool = True, extend: float | None = None) -> None:
    """The byte-synchronous beam's flags, defaults from :class:`~ppl_tok.strings.beam.StringSearchConfig`:
    ``--beam``, ``--prune``, ``--search-budget``, ``--extend-threshold`` (``extend``: the command's own default,
    said in its help) and (``prefill``) ``--prefill``; :func:`search_config` reads them."""
    from ppl_tok.strings.beam import PREFILL_MODES, StringSearchConfig
    from ppl_tok.strings.beam import AUTO_HEAD_TOKENS

    g = p.add_argument_group("the beam over strings")
    g.add_argument("--beam", type=POSITIVE, default=StringSearchConfig.beam,
                   help=f"token prefixes kept per byte offset (default {StringSearchConfig.beam})")
    g.add_argument("--prune", type=positive, default=StringSearchConfig.prune, metavar="NATS",
                   help=f"drop prefixes this far below the best at their offset (default {StringSearchConfig.prune:g})")
    g.add_argument("--search-budget", type=POSITIVE, metavar="FORWARDS",
                   help="token forwards, past which the beam narrows to one prefix (default: none)")
    add_extend_argument(g, default=extend)
    if prefill:
        g.add_argument("--prefill", choices=PREFILL_MODES, default=StringSearchConfig.prefill,
                       help="how the prompt is conditioned on: exact (every covering), canonical-head (the prompt's "
                            "canonical tokens up to a token boundary before the last bytes a token could run past the "
                            "end of, in one forward, "
                            "the beam over the rest: the LM over strings given that head tokenized canonically) or "
                            f"auto (canonical-head when that head has at least {AUTO_HEAD_TOKENS} tokens; default "
                            f"{StringSearchConfig.prefill})")


def add_extend_argument(p: argparse.ArgumentParser | Any, default_help: str | None = None,
                        default: float | None = None) -> None:
    """``--extend-threshold``: :class:`~ppl_tok.strings.beam.StringSearchConfig`'s ``extend_threshold`` (lazy extension).

    ``default_help``: the command's own default, said in the help (``--extend-threshold`` then defaults to ``None``:
    not given, which the command resolves); ``default``: the command's own default value (said in the help); else
    :class:`~ppl_tok.strings.beam.StringSearchConfig`'s."""
    from ppl_tok.strings.beam import StringSearchConfig

    if default is not None:
        default_help = format(default, "g")
    else:
        default = StringSearchConfig.extend_threshold if default_help is None else None
    p.add_argument("--extend-threshold", type=share, default=default, metavar="SHARE",
                   help="lazy extension: run a prefix through the LM only if it holds at least this share of the "
                        "text's mass at its offset, else prune it (0: every kept prefix; e.g. 0.001; default "
                        f"{default_help or format(StringSearchConfig.extend_threshold, 'g')})")
    p.add_argument("--boundary-threshold", type=share, default=None, metavar="SHARE",
                   help="lazy extension at the canonical tokenization's token boundaries (paths that rejoined it), "
                        "where --extend-threshold then applies inside canonical tokens only (default: "
                        "--extend-threshold everywhere; e.g. --extend-threshold 0.2 --boundary-threshold 1e-3)")
    p.add_argument("--rejoin-threshold", type=share, default=None, metavar="SHARE",
                   help="lazy extension for a split path's first prefix back on the canonical boundaries (default: "
                        "--boundary-threshold; e.g. 1e-6: one token's grace)")


def lazy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The lazy-extension keyword arguments of :class:`~ppl_tok.strings.beam.StringSearchConfig` from the flags
    :func:`add_extend_argument` adds (``--boundary-threshold`` and ``--rejoin-threshold`` ``None`` where a command
    lacks them)."""
    return {"extend_threshold": args.extend_threshold,
            "boundary_threshold": getattr(args, "boundary_threshold", None),
            "rejoin_threshold": getattr(args, "rejoin_threshold", None)}


def search_config(args: argparse.Namespace) -> Any:
    """The :class:`~ppl_tok.strings.beam.StringSearchConfig` of the flags of :func:`add_search_arguments`."""
    from ppl_tok.strings.beam import StringSearchConfig

    options = {"prefill": args.prefill} if hasattr(args, "prefill") else {}
    return StringSearchConfig(beam=args.beam, prune=args.prune, budget=args.search_budget, **lazy_options(args),
                              **options)


def add_vocabulary_arguments(p: argparse.ArgumentParser) -> None:
    """``--model`` or ``--tokenizer``: for commands that need a vocabulary only."""
    g = p.add_argument_group("vocabulary")
    g.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"model card, local folder or hub id (default {DEFAULT_MODEL})")
    g.add_argument("--tokenizer", help="a SentencePiece .model file or tokenizer folder (overrides --model)")


def add_ray_arguments(p: argparse.ArgumentParser, unit: str) -> None:
    """``--ray [ADDRESS]`` and ``--workers K``: score ``unit`` batches on Ray actors (checked by :func:`ray_address`)."""
    p.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help=f"score {unit} on Ray actors (pip install 'ppl-tok[ray]'): a local Ray, or the cluster at "
                        "ADDRESS (e.g. auto); the driver alone writes --out (docs/ray.md)")
    p.add_argument("--workers", type=POSITIVE, help="with --ray: actors, one LM each (default: one per GPU, else per CPU)")


def ray_address(args: argparse.Namespace, out: str = "--out") -> str | None:
    """``None`` without ``--ray``, else the address (``""``: a local Ray); ``--workers`` without ``--ray``, or
    ``--ray`` without ``out`` (the store that makes a distributed run resumable), is an error."""
    if args.ray is None:
        if args.workers is not None:
            raise ValueError("--workers needs --ray")
        return None
    if getattr(args, out.removeprefix("--").replace("-", "_")) is None:
        raise ValueError(f"--ray needs {out}: the driver stores each batch there as it is done (a lost worker's "
                         f"batch is dealt again, a rerun resumes); add {out} DIR")
    return args.ray


def add_json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (RFC 8259; non-finite numbers as \"-Infinity\", \"Infinity\", "
                        "\"NaN\")")


def add_command(sub: argparse._SubParsersAction, name: str, help: str, kind: str) -> argparse.ArgumentParser:
    """A ``ppl-tok`` subcommand with its model flags and ``--json``.

    ``kind``: ``"vocab"`` (a vocabulary is enough), ``"lm"`` (runs an LM), ``"lms"`` (runs one LM or an
    ensemble: ``--model`` repeatable) or ``"none"`` (no model).
    """
    p = sub.add_parser(name, help=help, description=help)
    if kind == "vocab":
        add_vocabulary_arguments(p)
    elif kind in ("lm", "lms"):
        add_lm_arguments(p, several=kind == "lms")
    add_json_argument(p)
    return p


def add_text_arguments(p: argparse.ArgumentParser, context: bool = True) -> None:
    """TEXT (``-``: standard input) or ``--file PATH``, and optionally ``--context``."""
    p.add_argument("text", nargs="?", metavar="TEXT",
                   help="the string, taken literally (- reads it from standard input)")
    p.add_argument("--file", dest="text_file", metavar="PATH",
                   help="read the text from this UTF-8 file (- for standard input)")
    if context:
        p.add_argument("--context", default="", help="text the string continues (default: none, only BOS)")


def _emit(args: argparse.Namespace, payload: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print(to_json(payload))
    else:
        print("\n".join(lines))


def _check_utf8(what: str, value: str) -> str:
    """``value`` if it is valid Unicode text; else a clear error naming the argument."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        ch = value[err.start]
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # how Python passes a command-line byte that is not UTF-8
            found = f"the byte 0x{ord(ch) - 0xDC00:02X}, which is not valid UTF-8,"
        else:
            found = f"a lone surrogate U+{ord(ch):04X}"
        raise ValueError(f"{what} has {found} at character {err.start}: give UTF-8 text "
                         "(or put it in a UTF-8 file and use --file PATH)") from None
    return value


def _read_text(path: str, flag: str = "--file") -> str:
    """The UTF-8 text of a file or of standard input, read no further than the ``text_bytes`` limit allows
    (``flag``: the argument that named the file, in the error)."""
    most = limits().text_bytes
    if path == STDIN:
        data, where = sys.stdin.buffer.read(most + 1), "standard input"
    else:
        try:
            with open(path, "rb") as f:
                data, where = f.read(most + 1), path
        except OSError as err:
            raise ValueError(f"{flag}: cannot read {path}: {err.strerror or err}") from err
    limits().check("text_bytes", len(data), f"{where}'s length in bytes (at least)" if len(data) > most else "")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{where} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def _resolve_text(args: argparse.Namespace) -> None:
    """Fill ``args.text`` from TEXT, ``-`` (stdin) or ``--file PATH``, checked."""
    if args.text_file is not None and args.text is not None:
        raise ValueError("give TEXT or --file PATH, not both")
    if args.text_file is not None:
        args.text = _read_text(args.text_file)
    elif args.text == STDIN:
        args.text = _read_text(STDIN)
    elif args.text is None:
        raise ValueError("give the TEXT, - to read it from standard input, or --file PATH")
    else:
        _check_utf8("TEXT", args.text)
    if not args.text:
        raise ValueError("the text is empty: the empty string has no tokenization")
    limits().check("text_bytes", len(args.text.encode("utf-8")), "the text's length in bytes")


def _load_lm(args: argparse.Namespace) -> Any:
    return load_lm(lm_spec(args))


def _load_lms(args: argparse.Namespace) -> list[Any]:
    """The LMs of every ``--model``, each distinct one loaded once."""
    loaded: dict[LMSpec, Any] = {}
    return [loaded[s] if s in loaded else loaded.setdefault(s, load_lm(s)) for s in lm_specs(args)]


def _check_context(args: argparse.Namespace, lm: Any, walk: str | None = None, covering: bool = True) -> None:
    """``--context`` must have a tokenization; the context and ``args.text`` must fit the model's window.

    ``walk``: what the command scores whole (``"the prompt"``, ...): it is refused before any work when even
    its shortest tokenization (``covering``: a covering, for a walk over strings) overflows the window
    (:func:`~ppl_tok.strings.prefill.check_window`). Otherwise (and for a walk over tokenizations, not
    ``covering``) a canonical tokenization past the window is a warning: its positions past it are scored
    out of distribution.
    """
    from ppl_tok.lm.base import model_window  # torch and networkx when a command runs, not for --help
    from ppl_tok.mdd import compile_mdd

    text = getattr(args, "text", None) or ""
    ids: tuple[int, ...] = ()
    if args.context:
        try:
            compile_mdd(args.context, lm.vocab)
            ids = tuple(lm.vocab.encode(args.context))
        except ValueError as err:
            raise ValueError(f"--context: {err}") from None
    if walk is not None:
        from ppl_tok.strings.prefill import check_window

        check_window(lm, text.encode("utf-8"), args.context, walk, covering)
        if covering:  # a walk over strings stops with ContextLengthError rather than score past the window
            return
    window = model_window(lm)
    total = (lm.bos_id is not None) + len(ids) + (len(lm.canonical(text)) if text else 0)
    if window is not None and total > window:
        print(f"ppl-tok {args.command}: warning: BOS, context and text are {total} tokens, more than "
              f"{lm.name}'s window of {window}: positions past it are scored out of distribution",
              file=sys.stderr)


def _vocab(args: argparse.Namespace):
    return load_vocabulary(args.tokenizer or args.model)


def _tokens(vocab, ids: Sequence[int]) -> list[dict[str, Any]]:
    return [{"id": int(t), "token": vocab.token_name(t)} for t in ids]


def _names(vocab, ids: Sequence[int]) -> str:
    return " ".join(vocab.token_name(t) for t in ids)
