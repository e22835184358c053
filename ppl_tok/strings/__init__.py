"""The LM over strings: probabilities summed over tokenizations, by a byte-synchronous beam.

See ``docs/strings.md``. :func:`string_marginal` brackets ``log p(x | c)``.
"""

from .beam import ByteBeam, StringSearchConfig
from .marginal import StringMarginal, string_marginal

__all__ = ["ByteBeam", "StringMarginal", "StringSearchConfig", "string_marginal"]
