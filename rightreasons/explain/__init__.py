"""Explanations and attributions: batched B-cos explanations and their visualisation."""

from .attribution import Attribution, attribute, compute_attribution
from .explanation import Explanation, explain, resolve_target
from .visualize import save_explanation, to_rgba

__all__ = ["Attribution", "Explanation", "attribute", "compute_attribution", "explain", "resolve_target",
           "save_explanation", "to_rgba"]
