"""The paper's figures (ppl_tok.plots): each written as a PNG of the documented size."""

import struct

from ppl_tok.canonicity import Canonicity
from ppl_tok.plots import plot_canonicity, plot_distribution, plot_estimates
from toys import EXACT, VOCAB


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # the IHDR chunk: width, height


def test_the_distribution_grows_with_the_tokenizations_shown(tmp_path):
    assert EXACT.count >= 3
    plot_distribution(EXACT, VOCAB, tmp_path / "d.png", top=3)  # an ExactMarginal: converted to its posterior
    assert png_size(tmp_path / "d.png") == (900, round(150 * (0.3 * 3 + 1.2)))  # 6 in wide, 0.3 in per bar + 1.2, 150 dpi
    plot_distribution(EXACT, VOCAB, tmp_path / "d1.png", top=1)
    assert png_size(tmp_path / "d1.png") == (900, round(150 * 1.5))


def test_canonicity_and_estimates_are_5_by_3_2_inches(tmp_path):
    plot_canonicity(Canonicity(lengths=[1, 2, 3], canonical=[1.0, 0.5, 0.25], undecodable=[0.0] * 3,
                               samples=[]), tmp_path / "c.png")
    plot_estimates([8, 16, 32], [-5.2, -5.1, -5.05], canonical=-5.5, exact=None, path=tmp_path / "e.png", title="t")
    assert png_size(tmp_path / "c.png") == png_size(tmp_path / "e.png") == (750, 480)
