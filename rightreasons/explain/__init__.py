"""Every explanation of the package: the method registry, the layer resolver and hooks, attribution, figures.

* :mod:`.methods` — what each method (``bcos``, ``bcos_weights``, ``ixg``, ``gradcam``, ``intgrad``) computes and
  returns;
* :mod:`.layers` — layer names → modules (wrapped models included) and the forward-hook helper;
* :mod:`.attribution` — :func:`attribute` (any method, any layer, differentiable) and :func:`explain` (B-cos ``W(x)``);
* :mod:`.functional` — the same B-cos explanations inside a training step compiled whole (:func:`functional_attribute`,
  :class:`CompiledStep`);
* :mod:`.visualize` — colour explanations and the explanation figure (class names, probability, boxes, colour
  bar).

Guidance, e²KD and the localisation metrics all call :func:`attribute` (a compiled guided or e²KD step
:func:`functional_attribute`); none has its own explanation code.
"""

from .attribution import INTGRAD_STEPS, Attribution, attribute, explain, resolve_target
from .functional import FUNCTIONAL_METHODS, CompiledStep, functional_attribute
from .layers import GUIDANCE_LAYERS, capture_outputs, resolve_layer
from .methods import MAP_METHOD_NAMES, METHOD_NAMES, METHODS, Method, get_method, layer_for
from .visualize import class_name, prediction_caption, save_explanation, to_rgba

__all__ = ["FUNCTIONAL_METHODS", "INTGRAD_STEPS", "Attribution", "CompiledStep", "GUIDANCE_LAYERS", "MAP_METHOD_NAMES",
           "METHODS", "METHOD_NAMES", "Method", "attribute", "capture_outputs", "class_name", "explain",
           "functional_attribute", "get_method", "layer_for", "prediction_caption", "resolve_layer", "resolve_target",
           "save_explanation", "to_rgba"]
