"""The reading-time study: focal-area surprisal over strings, alignment to a corpus's regions, the regressions."""
