"""Why it is hard: the paper's 3-SAT and #3-SAT reductions as programmable LMs.

Geh et al. (2024), Thm. 4.2 (the most likely tokenization, MLT, is NP-complete)
and Thm. 5.2 (the marginal string probability, MSP, is #P-hard), appendix
"Hardness". For a 3-CNF over ``n`` variables with ``K`` clauses:

* the string is ``"abc" * n + "d" * K`` and the vocabulary ``{a, bc, ab, c, d}``
  (plus a BOS token without surface). Each ``abc`` block is ``[a, bc]`` or
  ``[ab, c]``: a tokenization is an assignment, ``X_j = True`` iff block ``j``
  starts with ``a``. The ``d`` tokens check the clauses one by one;
* the LM gives every block ``0.45 * 0.9`` and the ``k``-th ``d`` a probability
  that depends on whether clause ``k`` holds under the assignment read off the
  tokens so far.

MLT: ``max_v p(v, x) > 0.5 * 0.45^n * 0.9^(n+K)`` iff the formula is satisfiable.
MSP: the model count ``C`` satisfies
``(C - 0.5) * 0.45^n * 0.9^n < p(x) < (C + 0.5) * 0.45^n * 0.9^n``.

Where this module reads the appendix differently (each checked by the tests,
``tests/test_sat.py``, against brute force on hundreds of random formulas):

1. The string: the appendix sets ``x_{3i+1}`` twice (``a`` and ``c``); the
   third character of each block is ``x_{3i+3} = c``.
2. Token indices: the LM's positions start at ``v_0`` (the first token after
   BOS), so variable ``X_j`` (1-based) is read from ``v_{2(j-1)}``, not ``v_{2j}``.
3. Normalisation: the appendix's ``0.033`` for the three unlikely first tokens
   makes a distribution summing to 0.999; we use ``0.1 / 3`` so each
   next-token distribution sums to one (the construction's 0.45 and 0.9 are kept).
4. In the MLT proof a violated clause gives ``d`` probability ``0.1`` (the
   appendix's text says "0.9 or 0.025"): every unsatisfying tokenization has
   probability at most ``(0.1 / 0.9)`` times the bound's ``0.45^n 0.9^(n+K)``,
   still below the threshold.
5. In the MSP proof an unsatisfying tokenization has probability at most
   ``eps * 0.45^n 0.9^n`` with ``eps = 0.5^(n+K+1)`` (not ``eps / 4``); the
   bounds still hold: the unsatisfying total is at most ``0.5^(K+1) < 0.5``
   times ``0.45^n 0.9^n``, and ``C (1 - eps)^K > C - 0.5``.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from pathlib import Path

from ppl_tok.common.lines import split_lines
from ppl_tok.lm.toy import FunctionLM
from ppl_tok.vocabulary import Vocabulary

#: The reduction's vocabulary: id 0 is BOS (no surface).
PIECES = (None, "a", "bc", "ab", "c", "d")
BOS, A, BC, AB, C, D = range(6)


#: The largest formulas :meth:`CNF.from_dimacs` accepts by default: the reductions
#: enumerate or search ``2^n`` assignments, so far smaller ones are already out of reach.
MAX_VARS = 100_000
MAX_CLAUSES = 1_000_000


def _problem_line(line: str, n: int, max_vars: int, max_clauses: int) -> tuple[int, int]:
    """``(variables, clauses)`` of a ``p cnf V C`` line, checked."""
    parts = line.split()
    if len(parts) != 4 or parts[0] != "p" or parts[1] != "cnf":
        raise ValueError(f"line {n}: bad problem line {line!r} (expected 'p cnf VARS CLAUSES')")
    sizes = []
    for what, tok, limit in (("variables", parts[2], max_vars), ("clauses", parts[3], max_clauses)):
        try:
            value = int(tok)
        except ValueError:
            raise ValueError(f"line {n}: the number of {what} {tok!r} is not an integer") from None
        if value < 1:
            raise ValueError(f"line {n}: the number of {what} must be at least 1, got {value}")
        if value > limit:
            raise ValueError(f"line {n}: {value} {what} is more than the {limit} this reduction accepts")
        sizes.append(value)
    return sizes[0], sizes[1]


@dataclass(frozen=True)
class CNF:
    """A CNF formula: ``clauses`` are tuples of non-zero DIMACS literals over variables ``1..n``."""

    num_vars: int
    clauses: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if self.num_vars < 1:
            raise ValueError("a CNF needs at least one variable")
        if not self.clauses:
            raise ValueError("a CNF needs at least one clause")
        for clause in self.clauses:
            if not clause or len(clause) > 3:
                raise ValueError(f"clause {clause} must have 1 to 3 literals (3-CNF)")
            for lit in clause:
                if lit == 0 or abs(lit) > self.num_vars:
                    raise ValueError(f"literal {lit} is outside variables 1..{self.num_vars}")

    def satisfied(self, assignment: tuple[bool, ...]) -> bool:
        """Whether ``assignment`` (``assignment[j-1]`` is variable ``j``) satisfies every clause."""
        return all(self.clause_satisfied(k, assignment) for k in range(len(self.clauses)))

    def clause_satisfied(self, k: int, assignment: tuple[bool, ...]) -> bool:
        return any(assignment[abs(lit) - 1] == (lit > 0) for lit in self.clauses[k])

    def assignments(self):
        return itertools.product((False, True), repeat=self.num_vars)

    def brute_force_sat(self) -> tuple[bool, ...] | None:
        """A satisfying assignment by trying all ``2^n`` (small ``n``), or ``None``."""
        return next((a for a in self.assignments() if self.satisfied(a)), None)

    def brute_force_count(self) -> int:
        """The number of satisfying assignments (#SAT) by trying all ``2^n``."""
        return sum(self.satisfied(a) for a in self.assignments())

    # -------------------------------------------------------------- DIMACS
    def to_dimacs(self) -> str:
        lines = [f"p cnf {self.num_vars} {len(self.clauses)}"]
        lines += [" ".join(map(str, clause)) + " 0" for clause in self.clauses]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_dimacs(cls, text: str, max_vars: int = MAX_VARS, max_clauses: int = MAX_CLAUSES) -> CNF:
        """Parse DIMACS CNF text; every error names its line.

        The header's sizes are checked against ``max_vars`` and ``max_clauses``
        before anything is built (the reduction string has ``3 n + K`` characters).
        """
        header, header_line, clauses, current = None, 0, [], []
        for n, raw in enumerate(split_lines(text), 1):
            line = raw.strip()
            if not line or line.startswith(("c", "%")):
                continue
            if line.startswith("p"):
                if header is not None:
                    raise ValueError(f"line {n}: a second 'p cnf' line (the first is line {header_line})")
                header, header_line = _problem_line(line, n, max_vars, max_clauses), n
                continue
            if header is None:
                raise ValueError(f"line {n}: clause before the 'p cnf' line")
            try:
                lits = [int(tok) for tok in line.split()]
            except ValueError as err:
                raise ValueError(f"line {n}: {err}") from err
            for lit in lits:
                if lit == 0:
                    clauses.append(tuple(current))
                    current = []
                else:
                    if abs(lit) > header[0]:
                        raise ValueError(f"line {n}: literal {lit} is outside variables 1..{header[0]}")
                    current.append(lit)
            if len(clauses) + bool(current) > header[1]:
                raise ValueError(f"line {n}: more clauses than the {header[1]} the header announces")
        if header is None:
            raise ValueError("no 'p cnf' problem line")
        if current:
            clauses.append(tuple(current))
        if len(clauses) != header[1]:
            raise ValueError(f"the header announces {header[1]} clauses but the file has {len(clauses)}")
        return cls(header[0], tuple(clauses))

    @classmethod
    def read(cls, path: str | Path) -> CNF:
        """Read a DIMACS file (errors name the file)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not a UTF-8 (or ASCII) DIMACS file: {err}") from err
        try:
            return cls.from_dimacs(text)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err

    @classmethod
    def random(cls, num_vars: int, num_clauses: int, seed: int = 0) -> CNF:
        """A random 3-CNF: each clause has 3 distinct variables (fewer if ``n < 3``), random signs."""
        rng = random.Random(seed)
        clauses = []
        for _ in range(num_clauses):
            chosen = rng.sample(range(1, num_vars + 1), min(3, num_vars))
            clauses.append(tuple(v if rng.random() < 0.5 else -v for v in chosen))
        return cls(num_vars, tuple(clauses))


def reduction_string(cnf: CNF) -> str:
    """``abc`` once per variable, then ``d`` once per clause."""
    return "abc" * cnf.num_vars + "d" * len(cnf.clauses)


def reduction_vocabulary() -> Vocabulary:
    return Vocabulary.from_tokens(list(PIECES), name="sat-reduction")


def read_assignment(cnf: CNF, tokens: tuple[int, ...]) -> tuple[bool, ...] | None:
    """The assignment a token sequence encodes (``X_j`` iff ``v_{2(j-1)}`` is ``a``), if it has one."""
    if len(tokens) < 2 * cnf.num_vars:
        return None
    firsts = tokens[0 : 2 * cnf.num_vars : 2]
    if any(t not in (A, AB) for t in firsts):
        return None
    return tuple(t == A for t in firsts)


def _block_step(prev: int | None) -> dict[int, float]:
    """The first 2n positions: blocks ``[a, bc]`` or ``[ab, c]``, each worth ``0.45 * 0.9``."""
    if prev is None or prev in (BC, C):
        rest = 0.1 / 3
        return {A: 0.45, AB: 0.45, BC: rest, C: rest, D: rest}
    if prev == A:
        return {BC: 0.9, A: 0.025, AB: 0.025, C: 0.025, D: 0.025}
    if prev == AB:
        return {C: 0.9, A: 0.025, AB: 0.025, BC: 0.025, D: 0.025}
    return {t: 0.2 for t in (A, BC, AB, C, D)}  # after "d": never on a tokenization of x


def _lm(cnf: CNF, d_if_sat: float, d_if_unsat: float, name: str) -> FunctionLM:
    n = cnf.num_vars
    vocab = reduction_vocabulary()

    def next_token(prefix: tuple[int, ...]) -> list[float]:
        i = len(prefix) - 1  # position of the next token: v_0 follows BOS
        probs = [0.0] * len(PIECES)
        if i < 2 * n:
            dist = _block_step(prefix[-1] if i > 0 else None)
        else:
            k = i - 2 * n  # the clause this "d" checks (0-based)
            assignment = read_assignment(cnf, prefix[1:])
            ok = assignment is not None and k < len(cnf.clauses) and cnf.clause_satisfied(k, assignment)
            p_d = d_if_sat if ok else d_if_unsat
            dist = {D: p_d, A: (1 - p_d) / 4, BC: (1 - p_d) / 4, AB: (1 - p_d) / 4, C: (1 - p_d) / 4}
        for t, p in dist.items():
            probs[t] = p
        return probs

    return FunctionLM(vocab, next_token, bos_id=BOS, name=name)


@dataclass(frozen=True)
class Reduction:
    """A formula's string, vocabulary, LM and the threshold (or bounds) of the proof."""

    cnf: CNF
    text: str
    lm: FunctionLM
    log_threshold: float

    @property
    def threshold(self) -> float:
        return math.exp(self.log_threshold)


def mlt_reduction(cnf: CNF) -> Reduction:
    """Thm. 4.2: satisfiable iff the most likely tokenization's probability exceeds the threshold
    ``0.5 * 0.45^n * 0.9^(n+K)``."""
    n, k = cnf.num_vars, len(cnf.clauses)
    log_threshold = math.log(0.5) + n * math.log(0.45) + (n + k) * math.log(0.9)
    return Reduction(cnf, reduction_string(cnf), _lm(cnf, 0.9, 0.1, "mlt-reduction"), log_threshold)


def msp_reduction(cnf: CNF) -> Reduction:
    """Thm. 5.2: the model count is ``round(p(x) / (0.45^n * 0.9^n))``; ``log_threshold`` is the log unit."""
    n, k = cnf.num_vars, len(cnf.clauses)
    eps = 0.5 ** (n + k + 1)
    log_unit = n * (math.log(0.45) + math.log(0.9))
    return Reduction(cnf, reduction_string(cnf), _lm(cnf, 1 - eps, eps, "msp-reduction"), log_unit)


def model_count(log_marginal: float, reduction: Reduction) -> int:
    """The ``C`` with ``(C - 0.5) u < p(x) < (C + 0.5) u`` for the unit ``u = 0.45^n 0.9^n``."""
    return int(round(math.exp(log_marginal - reduction.log_threshold)))
