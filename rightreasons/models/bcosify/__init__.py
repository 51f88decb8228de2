"""B-cosification: a pretrained standard network converted into a B-cos network (Arya, Rao, Böhle, Schiele, NeurIPS
2024; docs/science.md, B-cosification), built from the layer kit so that explanation mode, exact second-order
gradients, ``explain``, ``attribute``, guidance and e²KD work on it unchanged.

:func:`bcosify` converts a model of a supported family and returns a new one (the argument is left as it was):

* **input** — the six-channel ``[x, 1 − x]`` encoding of the raw image in [0, 1]. The standard model's per-channel
  normalisation ``n = (x − m) / s`` is folded into the first layer exactly and without a bias: since
  ``x − m = (1 − m)·x − m·(1 − x)``, the weights ``[W·(1 − m)/s, −W·m/s]`` on ``u = [x, 1 − x]`` give ``W·n``.
  Zero padding agrees too: a zero in ``u`` contributes nothing, as does a zero in ``n``. So contributions stay
  complete (the release instead normalises the six channels, which leaves a constant offset outside them);
* **convs and linears** → :class:`~rightreasons.bcos.layers.BcosifiedConv2d` / ``BcosifiedLinear`` with exponent
  ``b`` and the pretrained weights, no MaxOut. ``weight_mode="raw"`` (default) uses the weights as they are, as the
  B-cosification release does (the recipe whose speed-ups were measured; the output is ``‖w‖^B`` times the unit-norm
  B-cos output). ``"gain"`` normalises them and learns a per-channel gain initialised to the pretrained ``‖w‖``
  (exact at B = 1, ``‖w‖^(B − 1)`` times smaller than ``raw`` above);
* **norms** — BatchNorm → uncentred BatchNorm (running variance and γ kept, the running mean folded into the bias
  ``β − γ·μ/σ``), LayerNorm and GroupNorm stay centred; **biases** are removed (``keep_bias=False``, the recipe) or
  kept (``keep_bias=True``; :func:`decay_biases` / :func:`remove_biases` implement a bias-decay schedule);
* **activations** — ReLU stays (piecewise linear: exact as it is), GELU becomes ``x · Φ(x)`` with the gate as a
  dynamic weight (:class:`~rightreasons.bcos.activations.DynamicGELU`);
* **pooling and head** — the stem max-pool becomes an average pool of the same geometry (``maxpool_to_avgpool``); the
  CNN classifier becomes a 1×1 B-cos conv applied at every position before global average pooling (exact: the mean
  commutes with a linear map); a fixed :class:`~rightreasons.bcos.layers.LogitLayer` adds ``−log(C − 1)`` (C = the
  model's classes) when the biases are removed, 0 when they are kept (the classifier's own bias then plays its part);
* **ViTs** — the patch embedding (or the first conv of a ViT-c stem) is widened to six channels, the attention matrix
  is the dynamic weight on the values (:class:`~rightreasons.bcos.attention.AttentionMixing`; q/k/v stay a plain
  linear map), output projections and MLP layers are B-cos units, LayerNorms stay centred. Mean pooling and the head
  keep their order, so the conversion preserves the function. The additive positional embedding (and timm's class
  token) are constant terms: the converted ViTs are affine (``is_affine = True``).

With ``b=1, keep_bias=True, maxpool_to_avgpool=False`` the converted model computes the original's function:
``bcosify(m, b=1, keep_bias=True, maxpool_to_avgpool=False)(encode(x)) == m(normalise(x))`` — colour explanations of
the *original* model. With the defaults (``b=2``, no biases) CNNs are dynamic linear, ``logit − logit_bias ==
Σ W(x) ⊙ x``, ready for fine-tuning with the B-cos recipe (``configs/bcosify/``).

Supported: torchvision-style ResNets and DenseNets (:class:`~rightreasons.models.standard.ResNet` /
:class:`~rightreasons.models.standard.DenseNet` and plain torchvision instances), the standard Simple ViT / ViT-c of
the B-cos release (:class:`~rightreasons.models.standard.StandardSimpleViT`) and timm ``VisionTransformer`` s with
standard blocks (token or average pooling, no attention pooling, gates or attention dropout); anything else is
refused with a :class:`~rightreasons.errors.UsageError` naming the module that cannot be converted.

Every source name ``S`` of :data:`SOURCES` is registered as ``bcosified_S``: ``create_model("bcosified_resnet18",
num_classes=10, inplanes=8, b=2)`` builds ``S`` (source arguments pass through) with fresh weights and converts it.
:func:`bcosify` records that name and every argument as ``model_args`` (for a plain torchvision model it finds the
registered architecture with the same state-dict layout), so ``save_model`` / ``load_model`` round-trip a converted
model and a training config can fine-tune it: ``model: {name: bcosified_resnet18, checkpoint: converted.safetensors}``.

The package reads top to bottom: :mod:`.layers` (how each standard layer converts, :class:`BcosifyOptions`),
:mod:`.models` (the converted model classes), :mod:`.convert` (:func:`bcosify`, the ``bcosified_*`` registrations),
:mod:`.schedules` (B ramps and bias decay while fine-tuning).
"""

from .convert import SOURCES, bcosify, build_bcosified
from .layers import BcosifyOptions, fold_normalisation
from .models import BcosifiedDenseNet, BcosifiedModel, BcosifiedResNet, BcosifiedSimpleViT, BcosifiedTimmViT
from .schedules import BRamp, decay_biases, linear_b, remove_biases, set_b

__all__ = ["BRamp", "BcosifiedDenseNet", "BcosifiedModel", "BcosifiedResNet", "BcosifiedSimpleViT",
           "BcosifiedTimmViT", "BcosifyOptions", "SOURCES", "bcosify", "build_bcosified", "decay_biases",
           "fold_normalisation", "linear_b", "remove_biases", "set_b"]
