"""Every explanation of the package: the method registry, the layer resolver and hooks, attribution, figures.

* :mod:`.methods` — what each method (``bcos``, ``bcos_weights``, ``ixg``, ``gradcam``, ``intgrad``) computes and
  returns;
* :mod:`.layers` — layer names → modules (wrapped models included) and the forward-hook helper;
* :mod:`.attribution` — :func:`attribute` (any method, any layer, differentiable) and :func:`explain` (B-cos ``W(x)``);
* :mod:`.visualize` — colour explanations and the explanation figure (class names, probability, boxes, colour
  bar).

Guidance, e²KD and the localisation metrics all call :func:`attribute`; none has its own explanation code.
"""

from .attribution import INTGRAD_STEPS, Attribution, attribute, explain, resolve_target
from .layers import GUIDANCE_LAYERS, capture_outputs, resolve_layer
from .methods import MAP_METHOD_NAMES, METHOD_NAMES, METHODS, Method, get_method, layer_for
from .visualize import class_name, prediction_caption, save_explanation, to_rgba

__all__ = ["INTGRAD_STEPS", "Attribution", "GUIDANCE_LAYERS", "MAP_METHOD_NAMES", "METHODS", "METHOD_NAMES", "Method",
           "attribute", "capture_outputs", "class_name", "explain", "get_method", "layer_for", "prediction_caption",
           "resolve_layer", "resolve_target", "save_explanation", "to_rgba"]
