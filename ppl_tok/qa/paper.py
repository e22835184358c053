"""The paper's own QA numbers (Geh et al., 2024, Tables 1-2 and appendix Tables 3-4), in percent.

The paper's models are Llama2 (7B), Gemma (2B) and Mamba; its splits are 1000
shuffled questions per dataset, N = 256 look-ahead samples.
"""

from __future__ import annotations

#: Table 1 / Table 3: canonical accuracy, tuned marginal accuracy, difference, tuned number of samples k.
TUNED_MARGINAL: dict[str, dict[str, tuple[float, float, float, int]]] = {
    "hellaswag": {"Llama2": (59.6, 60.4, 0.81, 41), "Gemma": (54.7, 55.8, 1.10, 256), "Mamba": (32.4, 31.6, -0.80, 256)},
    "socialiqa": {"Llama2": (44.1, 45.4, 1.33, 238), "Gemma": (48.7, 48.9, 0.21, 140), "Mamba": (39.1, 40.9, 1.80, 256)},
    "openbookqa": {"Llama2": (30.8, 33.1, 2.33, 7), "Gemma": (30.2, 31.0, 0.76, 163), "Mamba": (16.6, 22.3, 5.69, 1)},
}

#: Table 2 / Table 4: mixture accuracy, canonical accuracy, tuned alpha.
TUNED_MIXTURE: dict[str, dict[str, tuple[float, float, float]]] = {
    "hellaswag": {"Llama2": (59.7, 59.6, 0.3445), "Gemma": (55.8, 54.7, 0.6421), "Mamba": (31.6, 32.4, 0.5151)},
    "socialiqa": {"Llama2": (44.8, 44.1, 0.3244), "Gemma": (48.8, 48.7, 0.4816), "Mamba": (39.8, 39.1, 0.0)},
    "openbookqa": {"Llama2": (34.0, 30.8, 0.0201), "Gemma": (30.6, 30.2, 0.5753), "Mamba": (17.6, 16.6, 0.0)},
}
