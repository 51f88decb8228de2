"""What a person sees while a run trains: a progress bar on a terminal, log lines elsewhere.

On a terminal (stderr is one) the bar moves at every optimiser step and shows, beside tqdm's elapsed time, ETA and
steps/s, the loss of the newest logged step, the learning rate and images/s; the command line's status messages
meanwhile (a validation's line, a warning) are printed above the bar instead of through it. Without a terminal (a log file, a
batch job's output) each logged step — the steps whose losses ``metrics.jsonl`` records — is one line of this
module's logger::

    step 40/620 (epoch 1/10): loss=1.506, classification=0.7272, localization=0.7786, lr=0.001, 412.3 img/s, ETA 05:12

with every loss term, images/s since the previous line and the ETA at the pace of the run so far (validations
included, as they recur).
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from typing import Any

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from ..console import console_loggers

__all__ = ["Progress"]

logger = logging.getLogger(__name__)

#: keys of a training record that are not loss terms
NOT_TERMS = ("split", "step", "epoch", "lr")


class Progress:
    """The display of one training session from ``step`` of ``total_steps`` (``epochs`` epochs) with
    ``images_per_step`` images per optimiser step; ``bar``: this process may show a bar (on a terminal only);
    ``lines``: this process logs the lines where no bar shows. A context manager: the bar lasts as long as it."""

    def __init__(self, step: int, total_steps: int, epochs: int, images_per_step: int, *, bar: bool,
                 lines: bool) -> None:
        self.bar = tqdm(total=total_steps, initial=step, desc="train",
                        disable=None if bar else True)  # None: off unless stderr is a terminal
        self.lines = lines and self.bar.disable
        self.total_steps, self.epochs, self.images_per_step = total_steps, epochs, images_per_step
        self.start = self.last = (time.monotonic(), step)
        self.loss: float | None = None
        self._stack = ExitStack()

    def __enter__(self) -> Progress:
        self._stack.callback(self.bar.close)
        loggers = console_loggers()
        if loggers and not self.bar.disable:
            self._stack.enter_context(logging_redirect_tqdm(loggers, tqdm_class=type(self.bar)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def step(self, step: int, lr: float) -> None:
        """Optimiser step ``step`` is done: the bar moves and shows the loss of the newest logged step (reading every
        step's loss would make the host wait for the device), the learning rate ``lr`` and images/s."""
        if not self.bar.disable:
            loss = "" if self.loss is None else f"loss={self.loss:.4g}, "
            self.bar.set_postfix_str(f"{loss}lr={lr:.4g}, {self._images_per_second(step):.1f} img/s", refresh=False)
        self.bar.update(1)

    def logged(self, record: dict[str, Any]) -> None:
        """The training record of a logged step (``step``, ``epoch``, ``lr`` and the loss terms): its loss for the
        bar, and one line where no bar shows."""
        self.loss = record.get("loss", self.loss)
        if not self.lines:
            return
        step = record["step"]
        terms = ", ".join(f"{k}={v:.4g}" for k, v in record.items() if k not in NOT_TERMS)
        start, first = self.start
        left = (self.total_steps - step) * (time.monotonic() - start) / max(step - first, 1)
        logger.info("step %d/%d (epoch %d/%d): %s, lr=%.4g, %.1f img/s, ETA %s", step, self.total_steps,
                    record["epoch"], self.epochs, terms, record["lr"], self._images_per_second(step),
                    tqdm.format_interval(left))

    def _images_per_second(self, step: int) -> float:
        """Images per second over the steps since the previous call (or the session's start)."""
        now, (then, before) = time.monotonic(), self.last
        self.last = (now, step)
        return (step - before) * self.images_per_step / max(now - then, 1e-9)
