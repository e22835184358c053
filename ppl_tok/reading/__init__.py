"""The reading-time study: focal-area surprisal over strings, alignment to a corpus's regions, the regressions."""

#: Provo's eye-tracking measures (the paper's)
PROVO_MEASURES = ("FirstFixationDuration", "DwellTime", "SkipRate")
