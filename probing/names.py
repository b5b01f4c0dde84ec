"""The names of a probing output folder's files (`probing.plots` writes them): a module of
names, which imports nothing."""

PROBES_JSON = "probe_results.json"
PROBE_FIGURES = {  # figure -> file name in a probing output folder (Figure 7: one per attention row)
    "figure2": "figure2_shuffle.png",
    "figure3a": "figure3a_hidden_state_task.png",
    "figure3b": "figure3b_previous_tokens.png",
}
FIGURE7_PATTERN = "figure7_attention_row{row}.png"
PATCHING_JSON = "patching.json"  # scripts/patching.py's results
PATCHING_FIGURE = "patching.png"  # and its figure
