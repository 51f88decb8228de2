"""Group robustness: the standard methods against spurious correlations as tasks and procedures of the trainer
(``rightreasons robust``), beside box guidance.

* :mod:`.config` — the ``robustness`` section and :class:`RobustConfig`;
* :mod:`.objectives` — group-balanced reweighting and subsampling, GroupDRO, weighted means across processes;
* :mod:`.jtt` — JTT's error set from a first-stage model;
* :mod:`.task` — :class:`RobustTask` (registered as ``robust``);
* :mod:`.dfr` — DFR: last-layer retraining on the group-balanced validation split;
* :mod:`.recipe` — :class:`RobustRun` (a training as a typed config) and :class:`RobustVariant` (a method of the study);
* :mod:`.study` — ``rightreasons study robustness``: all of them beside box guidance, with their annotation cost.
"""

from .config import METHODS, RobustConfig, RobustnessConfig
from .jtt import error_set
from .objectives import GroupDRO, balanced_subset, group_counts, inverse_size_weights, weighted_mean
from .recipe import RobustRun, RobustVariant
from .task import RobustTask

__all__ = ["GroupDRO", "METHODS", "RobustConfig", "RobustRun", "RobustTask", "RobustVariant", "RobustnessConfig",
           "balanced_subset", "error_set", "group_counts", "inverse_size_weights", "weighted_mean"]
