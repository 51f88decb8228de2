"""Model guidance: fine-tuning classifiers with bounding boxes (``rightreasons guide``, ``study guidance``).

* :mod:`.config` — the ``guidance`` and ``selection`` sections and :class:`GuideConfig`;
* :mod:`.losses` — the localisation losses (Energy, L1, PPCE, RRR*);
* :mod:`.objective` — :class:`GuidanceObjective`: attributions of one training step and their loss;
* :mod:`.task` — :class:`GuidanceTask` (registered as ``guide``);
* :mod:`.choosing` — a ``guide`` run with a ``selection`` grid: every candidate trained, the starting model among
  them, the best on validation exported and scored once on test;
* :mod:`.recipe` — :class:`GuidedRun`, a guided fine-tuning as a typed config, and :class:`GuidanceRecipe`, how the
  study and the demo train a baseline and its fine-tunings;
* :mod:`.study` — baseline and guided fine-tunings over a grid of data variants, chosen on validation, reported on
  test.
"""

from .config import GuidanceConfig, GuideConfig
from .losses import LOSSES, energy_loss, energy_size_loss, get_loss, l1_loss, ppce_loss, reduce_loss, rrr_loss
from .objective import GuidanceObjective, GuidanceOutput, sample_classes
from .recipe import DataVariant, GuidanceRecipe, GuidedRun, GuidedVariant
from .task import GuidanceTask

__all__ = ["DataVariant", "GuidanceConfig", "GuidanceObjective", "GuidanceOutput", "GuidanceRecipe", "GuidanceTask",
           "GuideConfig", "GuidedRun", "GuidedVariant", "LOSSES", "energy_loss", "energy_size_loss", "get_loss",
           "l1_loss", "ppce_loss", "reduce_loss", "rrr_loss", "sample_classes"]
