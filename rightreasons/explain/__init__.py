"""Explanations and attributions: batched B-cos explanations and their visualisation."""

from .explanation import Explanation, explain, resolve_target
from .visualize import save_explanation, to_rgba

__all__ = ["Explanation", "explain", "resolve_target", "save_explanation", "to_rgba"]
