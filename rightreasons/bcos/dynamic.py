"""The one mechanism behind every dynamic-linear layer, and explanation mode.

A B-cos network computes ``y = W(x) x``: every layer multiplies its input by a *dynamic weight* that itself depends on
the input (the ``|cos|^(B-1)`` scale of a B-cos unit, the ``1/sigma`` of a norm, the attention matrix of a ViT). The
explanation ``W(x)`` is the input gradient taken with those dynamic weights held constant.

The reference implementation holds them constant by ``detach()``-ing them in the forward pass. That is enough to *read*
an explanation, but it cuts the dynamic weights out of the graph, so a loss computed on the explanation (model guidance,
e²KD) gets wrong parameter gradients. Here every dynamic-linear product goes through :func:`dynamic_apply`, a custom
autograd function whose

* forward is the plain product (so outputs are bit-identical with and without explanation mode);
* backward returns no gradient to the dynamic weight *only while the owning module explains* (``ExplanationSwitch``),
  but builds that backward from differentiable operations on the saved dynamic weight, so a second backward
  (``create_graph=True``) flows through the dynamic weight's own graph into every parameter exactly.

The outer backward (of a classification loss plus an explanation loss) must run outside :func:`explanation_mode`, where
the function behaves like an ordinary product.

**Memory.** A product stores only the tensors it is computed from, never its intermediates: a dynamic weight given as
:class:`Recomputed` (``|cos|^(B-1)`` from a unit's linear output and its one-channel patch-norm map, a norm's std from
its variance, a GELU gate from its input) is recomputed in the backward, and a product may take the linear steps around
it (a norm's centring and affine map) as ``extras``, so that they store nothing either; a B-cos unit's convolution
recomputes its normalised weight in the backward too. Its backward is itself such a function (:class:`_DynamicVjp`):
in an explanation's backward with ``create_graph=True`` it stores the incoming gradient and the product's inputs, and
the second backward computes what it needs from them. Gradients are those of the same operations, so they are exact
to every order; a B-cos network holds about as much for its backward as a standard one (``make bench``,
``activation-memory``).

**Speed.** A step's cost on a GPU is as much the number of operations it launches as their size (``make bench``,
``launches``). Where a product knows its gradients in closed form (a B-cos unit's scale, a norm, a unit's convolution:
``vjp`` / ``product_vjp``), its backward computes them with a few passes instead of recomputing the product and
differentiating it; a backward that builds no graph calls them directly, and an explanation's backward asks only for
the input's gradient. A closed form may also know what its weight's inputs are computed from (a unit's norm map and a
norm's batch variance are functions of the layer's input): a layer's own backward then gives their gradients to the
input directly, so that their own backward never runs. The second backward of an explanation's (to ``x`` alone) is in
closed form too (:func:`_input_vjp_vjp`), without recomputing and differentiating the first. Gradients nobody uses are
never computed or materialised (``None``, not zeros).

**torch.compile.** The switch is read when the backward runs, which a traced graph cannot do. So a product is traced
as its plain computation only while its switch is off (the switch is a guard: entering explanation mode never reuses
such a graph); AOTAutograd's partitioner then decides what to store and what to recompute, and a compiled B-cos network
has no graph break. :func:`explanation_mode` runs compiled models eagerly (``torch.compiler.set_stance``), so their
explanations and second-order gradients are exactly those of the eager model.

**The functional route** (:func:`functional_vjp`) is how a guided or e²KD step is compiled *whole* — forward,
explanation, loss and the parameters' backward in one graph (``compile`` of a run; :mod:`rightreasons.explain.functional`
uses it). AOTAutograd cannot trace a double backward, but it can trace a ``torch.func.vjp`` taken inside the compiled
function: the explanation's backward is then ordinary first-order operations of the forward graph, and the parameters'
backward differentiates them once. Holding a dynamic weight constant must then act on the transform's level only: on
this route a product is its plain computation with the weight passed through :func:`hold_constant`, functorch's
unwrapping of the innermost grad level (``torch._C._functorch._unwrap_for_grad``; ``.detach()`` or ``no_grad`` would
cut the weight out of the parameters' backward as well). The weight is a constant for the vjp with respect to the
input, yet the outer level's tensor with its graph, so the explanation loss reaches every parameter exactly, to second
order. The switches and :func:`explanation_mode` are not involved; the eager route above is untouched (the route is a
flag read first in :func:`dynamic_apply`, and torch.compile guards on it). The kit's custom autograd functions
(closed-form backwards) have no functorch form: on this route, as while tracing, their plain computations run
(:func:`custom_backwards`); and a transform may not mutate tensors it did not create, so a norm's running statistics
are updated once the vjp has returned (:func:`after_transform`). Synchronised BatchNorm is refused on this route (its
collective is an autograd function of its own). Float64 results equal the eager route's to rounding.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, NamedTuple, Sequence

import torch
from torch import Tensor, nn
from torch.autograd import grad as _autograd_grad  # bound once: the recomputation is no user-level backward
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["DynamicLinear", "ExplanationSwitch", "Recomputed", "after_transform", "custom_backwards", "dynamic_apply",
           "explanation_mode", "functional_route", "functional_vjp", "hold_constant", "is_explaining"]

Product = Literal["mul", "div", "matmul"]
#: ``product(weight, x, *extras)``: linear in ``x`` (and in ``extras`` that are linear maps around the product)
ProductFn = Callable[..., Tensor]


class ExplanationSwitch:
    """A flag shared by a dynamic-linear module and the autograd nodes it creates; read at backward time."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


class Recomputed(NamedTuple):
    """A dynamic weight ``fn(*inputs)`` that the product recomputes in its backward instead of storing it (with
    ``fn``'s intermediates): for weights that are cheap elementwise functions of tensors stored anyway. An ``fn``
    with a ``product_vjp(tensors, grad, wrt)`` method gives the gradients of the product it is made for (``fn(*inputs)
    * x`` unless it says otherwise) to those of ``tensors = (x, *inputs, *extras)`` marked ``wrt`` in closed form
    (differentiable operations), so that the backward need not recompute the product and differentiate it."""

    fn: Callable[..., Tensor]
    inputs: tuple[Tensor, ...]


def _reduce_to(grad: Tensor, shape: torch.Size) -> Tensor:
    """Sum a broadcast gradient back to ``shape`` (the inverse of broadcasting in a product)."""
    return grad if grad.shape == shape else grad.sum_to_size(shape)


def _same(a: Tensor | None, b: Tensor | None) -> bool:
    """Whether ``a`` and ``b`` hold the same values as the same memory (one tensor saved twice comes back from
    autograd as two tensor objects): a closed-form backward then adds two routes to it in one pass."""
    return a is b or (a is not None and b is not None and a.data_ptr() == b.data_ptr() and a.shape == b.shape
                      and a.stride() == b.stride() and a.dtype == b.dtype)


@dataclass(frozen=True, eq=False)  # hashed by identity: TorchDynamo hashes the products it calls
class _Elementary:
    """``weight * x``, ``x / weight`` or ``weight @ x`` with closed-form gradients (no recomputation)."""

    name: Product

    @property
    def elementwise(self) -> bool:
        """Whether each output element is its input element times a weight (a diagonal Jacobian in ``x``)."""
        return self.name != "matmul"

    def __call__(self, weight: Tensor, x: Tensor) -> Tensor:
        if self.name == "mul":
            return weight * x
        if self.name == "div":
            return x / weight
        return weight @ x

    def vjp(self, tensors: Sequence[Tensor], grad: Tensor, wrt: Sequence[bool]) -> tuple[Tensor, ...]:
        """Gradients to ``x`` and ``weight`` (those marked ``wrt``) from differentiable operations."""
        x, weight = tensors
        if self.name == "mul":
            grads = (lambda: grad * weight, lambda: grad * x)
        elif self.name == "div":
            grads = (lambda: grad / weight, lambda: -grad * x / (weight * weight))
        else:
            grads = (lambda: weight.transpose(-1, -2) @ grad, lambda: grad @ x.transpose(-1, -2))
        return tuple(_reduce_to(fn(), t.shape) for fn, t, need in zip(grads, tensors, wrt) if need)


_ELEMENTARY = {name: _Elementary(name) for name in ("mul", "div", "matmul")}


@dataclass(frozen=True)
class _Spec:
    """How a product is computed from its tensors ``(x, *weight_inputs, *extras)``."""

    weight: Callable[..., Tensor] | None  # None: the one weight input (if any) is the weight itself
    product: ProductFn
    weight_inputs: int

    @property
    def vjp(self) -> Callable[..., tuple[Tensor, ...]] | None:
        """The product's closed-form gradients, where it has them: ``product.vjp`` for a weight that is given, or the
        recomputed weight's ``fn.product_vjp``; ``None``: recompute the product and differentiate it."""
        if self.weight is None:
            return getattr(self.product, "vjp", None)
        return getattr(self.weight, "product_vjp", None)

    @property
    def value_and_vjp(self) -> Callable[..., tuple[Tensor | None, ...]] | None:
        """``product.value_and_vjp(tensors, grad, wrt)`` for a weight that is not recomputed: the product's value and
        its closed-form gradients from one call, where computing both shares work."""
        return getattr(self.product, "value_and_vjp", None) if self.weight is None else None

    @property
    def elementwise(self) -> bool:
        """Whether the product scales each element of ``x`` (``product.elementwise``: ``mul``, ``div``, a norm's
        normalisation): its Jacobian in ``x`` is diagonal, hence symmetric."""
        return bool(getattr(self.product, "elementwise", False))

    @property
    def offsets(self) -> tuple[int, ...]:
        """Indices (into the tensors) of the extras that the product adds rather than multiplies with the weight
        (``product.offsets``, indices into the extras: a norm's mean and bias)."""
        return tuple(1 + self.weight_inputs + i for i in getattr(self.product, "offsets", ()))

    def is_weight_input(self, index: int) -> bool:
        return 1 <= index <= self.weight_inputs

    def evaluate(self, tensors: Sequence[Tensor | None]) -> Tensor:
        x, inputs, extras = tensors[0], tensors[1:1 + self.weight_inputs], tensors[1 + self.weight_inputs:]
        weight = (inputs[0] if inputs else None) if self.weight is None else self.weight(*inputs)
        return self.product(weight, x, *extras)


def _leaf(t: Tensor | None, requires_grad: bool) -> Tensor | None:
    """A new leaf holding ``t``'s values, for a recomputation that autograd differentiates on its own."""
    return None if t is None else t.detach().requires_grad_(requires_grad)


def _vjp(spec: _Spec, tensors: Sequence[Tensor | None], grad: Tensor, wrt: Sequence[bool],
         connected: bool) -> tuple[Tensor | None, ...]:
    """The gradients of ``spec.evaluate(tensors)`` under ``grad`` to the tensors marked ``wrt``: by the product's own
    closed form (``spec.vjp``) where it has one, else by recomputing the product and differentiating it.
    ``connected``: ``tensors`` and ``grad`` are linked to their graphs (the slots of a second backward) and the
    result is differentiable in all of them; otherwise they are plain values and no graph is built."""
    if not any(wrt):
        return ()
    explicit = spec.vjp
    if explicit is not None:
        with torch.set_grad_enabled(connected):
            return explicit(tensors, grad, wrt)
    with torch.enable_grad():
        slots = tensors if connected else [_leaf(t, need) for t, need in zip(tensors, wrt)]
        wanted = [s for s, need in zip(slots, wrt) if need]
        return _autograd_grad(spec.evaluate(slots), wanted, grad, create_graph=connected, allow_unused=True)


def _autocast_state(t: Tensor) -> tuple[str, torch.dtype, bool]:
    """The autocast setting in force for ``t``'s device (a backward runs outside the forward's autocast block); off
    for devices without autocast (``meta``: shapes only)."""
    device = t.device.type
    if not torch.amp.is_autocast_available(device):
        return "cpu", torch.get_autocast_dtype("cpu"), False
    return device, torch.get_autocast_dtype(device), torch.is_autocast_enabled(device)


def _autocast(state: tuple[str, torch.dtype, bool]) -> torch.autocast:
    device, dtype, enabled = state
    return torch.autocast(device, dtype, enabled=enabled)


def _will_execute(node: torch.autograd.graph.Node) -> bool:
    """Whether the running backward executes ``node``. The engine refuses to say for a leaf that ``autograd.grad``
    was asked for (its gradient is captured, not accumulated): such a leaf is needed."""
    try:
        return torch._C._will_engine_execute_node(node)
    except RuntimeError:
        return True


def _needed(ctx, tensors: Sequence[Tensor | None], needs_input_grad: Sequence[bool]) -> tuple[bool, ...]:
    """Which of a function's ``tensors`` the running backward wants a gradient for: those that require one and whose
    gradient the engine will use. ``autograd.grad(out, x)`` uses none for the parameters, which an explanation's
    backward would otherwise compute and drop (the weight gradient of every convolution)."""
    nodes = iter(node for node, _ in ctx.next_functions)  # one per tensor argument, in order
    needed = []
    for t, need in zip(tensors, needs_input_grad):
        node = None if t is None else next(nodes)
        needed.append(need and node is not None and _will_execute(node))
    return tuple(needed)


class _DynamicProduct(torch.autograd.Function):
    """``spec.evaluate(tensors)`` whose backward gives no gradient to the weight inputs while its switch is active."""

    @staticmethod
    def forward(ctx, spec: _Spec, switch: ExplanationSwitch, *tensors: Tensor | None) -> Tensor:  # noqa: D102
        ctx.save_for_backward(*tensors)
        ctx.spec = spec
        ctx.switch = switch
        ctx.autocast = _autocast_state(tensors[0])
        return spec.evaluate(tensors)

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        spec, explaining, tensors = ctx.spec, ctx.switch.active, ctx.saved_tensors
        wrt = tuple(need and not (explaining and spec.is_weight_input(i))
                    for i, need in enumerate(_needed(ctx, tensors, ctx.needs_input_grad[2:])))
        with _autocast(ctx.autocast):  # recompute in the forward's precision
            # a backward that builds no graph needs no differentiable vjp: the gradients themselves suffice
            grads = iter(_DynamicVjp.apply(spec, wrt, grad, *tensors) if torch.is_grad_enabled()
                         else _vjp(spec, tensors, grad, wrt, connected=False))
        return None, None, *(next(grads) if need else None for need in wrt)


@dataclass
class _Recipe:
    """How to recompute an explanation's gradient that an elementwise product made (``x``'s gradient ``grad · weight``)
    from what that product's backward stores anyway: its incoming gradient (or that gradient's own recipe) and its
    tensors. The next product's backward stores the recipe instead of the gradient (:class:`_DynamicVjp`)."""

    spec: _Spec
    wrt: tuple[bool, ...]
    autocast: tuple[str, torch.dtype, bool]
    source: Tensor | _Recipe
    tensors: tuple[Tensor | None, ...]
    version: int
    kept: tuple[bool, Tensor] | None = None  # (connected, value) made for a later recipe, until its backward takes it

    def value(self, connected: bool, keep: bool = False) -> Tensor:
        """The gradient again, bit for bit (the same operations on the same values); differentiable in every tensor
        it is made from when ``connected``. A chain is recomputed once: a gradient made on the way to a later one is
        ``keep``-t until the backward of the product it entered takes it (that backward runs next)."""
        if self.kept is not None and self.kept[0] == connected:
            value = self.kept[1]
        else:
            source = self.source.value(connected, keep=True) if isinstance(self.source, _Recipe) else self.source
            with _autocast(self.autocast):
                value = _vjp(self.spec, self.tensors, source, self.wrt, connected)[0]
        self.kept = (connected, value) if keep else None
        return value


#: the explanation gradients that elementwise products made, by tensor: what a later backward may recompute
_RECIPES: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _recipe_of(grad: Tensor) -> _Recipe | None:
    """``grad``'s recipe, unless it changed since it was made (the engine sums a second route into it in place)."""
    recipe = _RECIPES.get(grad)
    return recipe if recipe is not None and recipe.version == grad._version else None


class _DynamicVjp(torch.autograd.Function):
    """The backward of :class:`_DynamicProduct` (the gradients to the tensors marked ``wrt``) as a function that stores
    only its inputs: a second backward differentiates the first in closed form where it can (an explanation's, to
    ``x`` alone, of a product with closed-form gradients: :func:`_input_vjp_vjp`), else recomputes it and
    differentiates it.

    In an explanation's backward the incoming gradient of a product is often what the product after it made by an
    elementwise scaling (a norm's ``1/σ``, a unit's ``|cos|^(B-1)``): such a gradient is not stored but recomputed
    from its :class:`_Recipe` in the second backward, so that a chain of elementwise products stores one gradient."""

    @staticmethod
    def forward(ctx, spec: _Spec, wrt: tuple[bool, ...], grad: Tensor,  # noqa: D102
                *tensors: Tensor | None) -> tuple[Tensor | None, ...]:
        recipe = _recipe_of(grad)
        ctx.save_for_backward(None if recipe else grad, *tensors)
        ctx.recipe, ctx.spec, ctx.wrt, ctx.autocast = recipe, spec, wrt, _autocast_state(grad)
        ctx.set_materialize_grads(False)
        grads = _vjp(spec, tensors, grad, wrt, connected=False)  # None: no gradient (zero), never materialised
        if spec.elementwise and wrt[0] and not any(wrt[1:]):
            _RECIPES[grads[0]] = _Recipe(spec, wrt, ctx.autocast, recipe or grad, tensors, grads[0]._version)
        return grads

    @staticmethod
    def backward(ctx, *grad_grads: Tensor | None):  # noqa: D102
        grad, *tensors = ctx.saved_tensors
        spec, wrt = ctx.spec, ctx.wrt
        if ctx.recipe is not None:
            with torch.set_grad_enabled(torch.is_grad_enabled()):
                grad = ctx.recipe.value(torch.is_grad_enabled())
        needs = _needed(ctx, (grad, *tensors), ctx.needs_input_grad[2:])
        connected = torch.is_grad_enabled()  # a third order: keep this backward differentiable too
        with _autocast(ctx.autocast):
            if spec.vjp is not None and wrt[0] and not any(wrt[1:]):
                return None, None, *_input_vjp_vjp(spec, tensors, grad, grad_grads[0], needs, connected)
            with torch.enable_grad():
                # slots of the tensors: new nodes (views) on their graphs for a third order, else new leaves
                slots = [t.view_as(t) if connected and t is not None and t.requires_grad
                         else _leaf(t, t is not None and t.is_floating_point()) for t in (grad, *tensors)]
                firsts = _vjp(spec, slots[1:], slots[0], wrt, connected=True)
                pairs = [(f, g) for f, g in zip(firsts, grad_grads) if f is not None and g is not None]
                wanted = [s for s, need in zip(slots, needs) if need]
                result = iter(_autograd_grad([f for f, _ in pairs], wanted, [g for _, g in pairs],
                                             create_graph=connected, allow_unused=True) if pairs and wanted else ())
        return None, None, *(next(result, None) if need else None for need in needs)


def _shaped(t: Tensor, shape: torch.Size) -> Tensor:
    """``t`` reshaped to ``shape`` (an elementwise product's output may flatten its input's groups)."""
    return t if t.shape == shape else t.reshape(shape)


def _input_vjp_vjp(spec: _Spec, tensors: Sequence[Tensor | None], grad: Tensor, grad_x: Tensor | None,
                   needs: Sequence[bool], connected: bool) -> tuple[Tensor | None, ...]:
    """The second backward of a first one to ``x`` alone (an explanation's), in closed form: the gradients to
    ``(grad, *tensors)`` marked ``needs`` of ``⟨grad_x, ∂⟨grad, P⟩/∂x⟩``.

    ``P`` is linear in ``x``, so that this is ``⟨grad, P(x := grad_x)⟩`` with the offsets (extras that ``P`` adds,
    e.g. a norm's mean and bias) dropped: ``x`` gets nothing, ``grad`` gets ``P(x := grad_x)`` and every other tensor
    the gradient of the product at ``x := grad_x`` (its closed form). For an elementwise product both come from one
    closed-form call, with the roles of ``grad`` and ``grad_x`` swapped (a diagonal Jacobian is symmetric)."""
    if grad_x is None or not any(needs):
        return (None,) * len(needs)
    x = tensors[0]
    offsets = spec.offsets
    others = [None if i in offsets else t for i, t in enumerate(tensors[1:], 1)]
    rest = tuple(need and i not in offsets for i, need in enumerate(needs[2:], 1))
    if spec.elementwise and grad.numel() == x.numel():
        grads = iter(_vjp(spec, (_shaped(grad, x.shape), *others), _shaped(grad_x, grad.shape), (needs[0], *rest),
                          connected))
        first = _shaped(next(grads), grad.shape) if needs[0] else None
    elif needs[0] and spec.value_and_vjp is not None:  # both from one call (sharing, e.g., a normalised weight)
        with torch.set_grad_enabled(connected):
            first, *others_grads = spec.value_and_vjp((grad_x, *others), grad, (False, *rest))
        grads = iter(others_grads)
    else:
        with torch.set_grad_enabled(connected):
            first = spec.evaluate((grad_x, *others)) if needs[0] else None
        grads = iter(_vjp(spec, (grad_x, *others), grad, (False, *rest), connected))
    return first, None, *(next(grads) if need else None for need in rest)


def dynamic_apply(weight: Tensor | Recomputed | None, x: Tensor, switch: ExplanationSwitch,
                  product: Product | ProductFn = "mul", extras: Sequence[Tensor | None] = ()) -> Tensor:
    """Apply a dynamic weight to ``x``: ``weight * x`` (broadcasting), ``x / weight`` (a norm's std), ``weight @ x``,
    or ``product(weight, x, *extras)`` for a callable linear in ``x`` (``extras``: tensors of the linear steps around
    the product, e.g. a norm's mean and affine parameters; ``None`` entries allowed).

    ``weight`` is a tensor, :class:`Recomputed` (recomputed in the backward rather than stored) or ``None`` (a linear
    map of ``x`` and ``extras`` alone that should store only them, e.g. a B-cos unit's convolution with its normalised
    weight). A callable ``product`` may have a ``vjp(tensors, grad, wrt)`` method, used when the weight is not
    :class:`Recomputed`: the gradients of the product to those of ``tensors`` (``x``, the weight if any, ``extras``)
    marked ``wrt``, from differentiable operations (so that an expensive product is not recomputed); and
    ``value_and_vjp(tensors, grad, wrt)``, the product's value and those gradients from one call. A product with
    closed-form gradients (its own or its recomputed weight's) says which of its extras it adds rather than multiplies
    with ``x`` (``offsets``, indices into ``extras``: a norm's mean and bias) and whether it scales each element of
    ``x`` (``elementwise``), so that an explanation's second backward is in closed form too. Forward values equal the
    plain computation. While ``switch.active`` the backward treats the weight as a constant (the
    explanation), but keeps it differentiable for a second backward.
    """
    recomputed = isinstance(weight, Recomputed)
    product_fn = _ELEMENTARY[product] if isinstance(product, str) else product
    if _ROUTE.active:  # the functional route (module docstring): the plain product, the weight held for the vjp only
        held = weight.fn(*weight.inputs) if recomputed else weight
        return product_fn(None if held is None else hold_constant(held), x, *extras)
    inputs = weight.inputs if recomputed else () if weight is None else (weight,)
    spec = _Spec(weight.fn if recomputed else None, product_fn, len(inputs))
    tensors = (x, *inputs, *extras)
    if (torch.compiler.is_compiling() and not switch.active
            or not any(t is not None and t.requires_grad for t in tensors)):
        return spec.evaluate(tensors)
    return _dynamic_product(spec, switch, tensors)


@torch.compiler.disable  # reached while compiling only in explanation mode, which runs eagerly (module docstring)
def _dynamic_product(spec: _Spec, switch: ExplanationSwitch, tensors: tuple[Tensor | None, ...]) -> Tensor:
    return _DynamicProduct.apply(spec, switch, *tensors)


class _Route:
    """Whether dynamic-linear products run on the functional route now (inside :func:`functional_vjp`), and the
    updates deferred until its transform returns (:func:`after_transform`)."""

    __slots__ = ("active", "deferred")

    def __init__(self) -> None:
        self.active = False
        self.deferred: list[tuple[Callable[..., None], tuple]] = []


_ROUTE = _Route()


def functional_route() -> bool:
    """Whether the forward running now is on the functional route (inside :func:`functional_vjp`)."""
    return _ROUTE.active


def custom_backwards() -> bool:
    """Whether the kit's custom autograd functions (closed-form backwards) may run now: not while torch.compile traces
    (a traced graph cannot read a switch; AOTAutograd differentiates the plain computation), nor on the functional
    route (functorch transforms take no autograd function without ``setup_context``). Elsewhere their plain
    computations run, with the same values."""
    return not (_ROUTE.active or torch.compiler.is_compiling())


@torch.compiler.assume_constant_result  # an int when traced: TorchDynamo cannot put current_level() in a graph
def _grad_level() -> int:
    return torch._C._functorch.current_level()


def hold_constant(t: Tensor) -> Tensor:
    """``t`` as the level around the innermost functorch grad transform sees it: a constant for that transform (the
    vjp of :func:`functional_vjp`) but, unlike ``t.detach()``, still differentiable in the levels around it (a
    training step's backward to the parameters). Call it inside a transform only."""
    return torch._C._functorch._unwrap_for_grad(t, _grad_level())


def after_transform(update: Callable[..., None], *args: object) -> None:
    """``update(*args)`` now or, on the functional route, once its transform has returned (with the tensors of
    ``args`` as the level around it sees them): a transform may not mutate tensors it did not create, such as a
    norm's running statistics."""
    if not _ROUTE.active:
        update(*args)
        return
    _ROUTE.deferred.append((update, tuple(hold_constant(a) if isinstance(a, Tensor) else a for a in args)))


def functional_vjp(fn: Callable[[Tensor], Tensor], x: Tensor) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """``(fn(x), vjp)`` on the functional route (module docstring): ``vjp(v)`` is ``vᵀ ∂fn/∂x`` with every dynamic
    weight held constant — for a B-cos model ``fn`` and ``v`` the one-hot rows of the explained classes, the
    explanation ``W(x)`` — and both are differentiable to every parameter (exact second order); traceable by
    torch.compile without a graph break, in one graph with whatever loss is computed from them.

    ``fn(x)`` runs once, under ``torch.func.vjp``; the running statistics its norms update are updated when it has
    returned, as its eager forward would update them. ``x``: the input ``[N, ...]``; ``v``: the shape of ``fn(x)``;
    ``vjp(v)``: the shape of ``x``."""
    deferred: list[tuple[Callable[..., None], tuple]] = []

    def on_route(inner: Tensor) -> Tensor:
        previous = _ROUTE.active, _ROUTE.deferred
        _ROUTE.active, _ROUTE.deferred = True, deferred
        try:
            return fn(inner)
        finally:
            _ROUTE.active, _ROUTE.deferred = previous

    out, vjp = torch.func.vjp(on_route, x)
    for update, args in deferred:
        update(*args)
    return out, lambda v: vjp(v)[0]


class DynamicLinear(nn.Module):
    """Base class of every module whose forward is ``W(x) x``; gives it a switch for :func:`explanation_mode`."""

    def __init__(self) -> None:
        super().__init__()
        self.explanation_switch = ExplanationSwitch()

    def dynamic(self, weight: Tensor | Recomputed | None, x: Tensor, product: Product | ProductFn = "mul",
                extras: Sequence[Tensor | None] = ()) -> Tensor:
        """Apply this module's dynamic ``weight`` to ``x`` through the shared mechanism (:func:`dynamic_apply`)."""
        return dynamic_apply(weight, x, self.explanation_switch, product, extras)

    @property
    def explaining(self) -> bool:
        """Whether input gradients currently hold this module's dynamic weights constant."""
        return self.explanation_switch.active


def is_explaining(model: nn.Module) -> bool:
    """Whether any dynamic-linear module of ``model`` is in explanation mode."""
    return any(m.explaining for m in model.modules() if isinstance(m, DynamicLinear))


@contextmanager
def explanation_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Hold the dynamic weights of ``model`` constant for input gradients taken inside the block.

    Inside, ``torch.autograd.grad(logit, x, create_graph=True)`` returns the dynamic linear map ``W(x)`` (the
    explanation); a loss on it, back-propagated *after* the block, reaches every parameter with exact gradients.
    Forward values are identical inside and outside. Nesting is allowed; the previous state is restored on exit.
    A compiled model runs eagerly inside; its forward must run inside the block too, or eagerly
    (``torch.compiler.set_stance("force_eager")``, as :func:`~rightreasons.explain.attribute` does), since a compiled
    graph traced with the switch off cannot hold the dynamic weights constant.

    Example::

        x.requires_grad_(True)
        with explanation_mode(model):
            logits = model(x)
            (w,) = torch.autograd.grad(logits[:, 3].sum(), x, create_graph=True)
        loss = criterion(logits, y) + lam * explanation_loss(w * x)
        loss.backward()
    """
    switches = [m.explanation_switch for m in model.modules() if isinstance(m, DynamicLinear)]
    previous = [s.active for s in switches]
    for s in switches:
        s.active = True
    try:
        with torch.compiler.set_stance("force_eager"):  # a compiled model explains as its eager self (module doc)
            yield model
    finally:
        for s, p in zip(switches, previous):
            s.active = p

