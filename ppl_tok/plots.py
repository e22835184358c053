"""Figures of the paper, drawn with matplotlib (Agg backend) to image files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ppl_tok.canonicity import Canonicity
from ppl_tok.common.plotting import pyplot
from ppl_tok.infer.exact import ExactMarginal
from ppl_tok.infer.posterior import TokenizationPosterior
from ppl_tok.vocabulary import Vocabulary


def plot_distribution(result: ExactMarginal | TokenizationPosterior, vocab: Vocabulary, path: str | Path,
                      top: int = 20) -> None:
    """Fig. 2: p(v | x) of the most likely tokenizations, the canonical one highlighted.

    ``result`` is exact (an :class:`~ppl_tok.infer.exact.ExactMarginal` or an exact
    posterior) or a posterior estimated from importance samples
    (:class:`~ppl_tok.infer.posterior.TokenizationPosterior`, self-normalised weights).
    """
    if isinstance(result, ExactMarginal):
        result = TokenizationPosterior.from_exact(result)
    plt = pyplot()
    post = result.probs[:top].tolist()
    labels = [" ".join(vocab.token_name(t) for t in v) for v in result.tokenizations[:top]]
    colors = ["tab:orange" if v == result.canonical else "tab:blue" for v in result.tokenizations[:top]]
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(post) + 1.2))
    ax.barh(range(len(post))[::-1], post, color=colors)
    ax.set_yticks(range(len(post))[::-1], labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("p(tokenization | text)" + ("" if result.num_samples is None else ", self-normalised IS"))
    how = (f"{result.count} tokenizations" if result.num_samples is None
           else f"{result.count} distinct of N={result.num_samples} {result.source} samples (ESS {result.ess:.1f})")
    ax.set_title(f"{result.text!r}: {how} (canonical in orange)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def plot_canonicity(result: Canonicity, path: str | Path, label: str = "") -> None:
    """Fig. 3: the fraction of canonical generations against the number of tokens generated."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(result.lengths, [100 * c for c in result.canonical], label=label or "canonical")
    ax.set_xlabel("tokens generated")
    ax.set_ylabel("% canonical")
    ax.set_ylim(0, 101)
    ax.set_title(f"Canonicity of generated text ({len(result.samples)} samples)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def plot_estimates(num_samples: Sequence[int], estimates: Sequence[float], canonical: float, exact: float | None,
                   path: str | Path, title: str = "") -> None:
    """Fig. 4a: the marginal estimate against the number of samples, canonical and exact as lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(num_samples, estimates, marker="o", label="IS estimate")
    ax.axhline(canonical, color="tab:orange", ls="--", label="canonical")
    if exact is not None:
        ax.axhline(exact, color="tab:green", ls=":", label="exact marginal")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of samples")
    ax.set_ylabel("log p")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
