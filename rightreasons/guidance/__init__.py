"""Model guidance: localisation losses on attributions and the guidance objective of a training step."""

from .losses import LOSSES, energy_loss, get_loss, l1_loss, ppce_loss, reduce_loss, rrr_loss
from .objective import GuidanceObjective, GuidanceOutput, sample_classes

__all__ = ["LOSSES", "GuidanceObjective", "GuidanceOutput", "energy_loss", "get_loss", "l1_loss", "ppce_loss",
           "reduce_loss", "rrr_loss", "sample_classes"]
