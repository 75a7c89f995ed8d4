"""A grade's judge made ready while its child starts: the cases' float64 truths computed (or read) in a thread of
their own, which is also where the judge's modules, numpy among them, are first imported. Importing them took
0.13 s of a warm grade's 1.2 s on an H100 host; here it overlaps the child's own start instead of delaying it.
Then the seeded inputs of every case the grade runs are stored where missing, for the next grades' children
(input_files.py; the truths' cases have theirs stored on the way).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cases import Case
    from ..config import Config


class Warming:
    """`stop()` ends the thread after the case at hand (a grade that ends early does not wait for the rest)."""

    def __init__(self, cases: list[Case], config: Config, inputs: list[Case] = ()):
        """`cases`: those whose truths the grade needs; `inputs`: every case its children run."""
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._warm, args=(cases, config, inputs), daemon=True, name="truths")
        self.thread.start()

    def _warm(self, cases: list[Case], config: Config, inputs: list[Case]) -> None:
        from . import input_files, truths  # the judge and numpy: imported here, off the parent's way to its child

        truths.warm(cases, config, self.stopping)  # their inputs stored on the way (truths.py)
        input_files.warm(list(inputs), config.cache_dir, self.stopping)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
