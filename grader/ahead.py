"""Answers a grade will read later, asked on a thread as the command starts (issue 50): the compilers' include
folders, the grader's digest, the toolkit's release. Each is a cached function: asked ahead, it is answered
once, and whoever needs it first waits for the thread rather than asking again. The grade's start (its
configuration, its sandbox's probe) goes on meanwhile; those waits are mostly on other programs."""
from __future__ import annotations

import threading
from collections.abc import Callable


class Ahead:
    """`work` (cached functions) run on a thread of its own once start() is called; wait() joins it, if started."""

    def __init__(self, name: str, *work: Callable[[], object]):
        self.name, self.work = name, work
        self._pending: list[threading.Thread] = []

    def start(self) -> None:
        # Not a daemon: a command that ends first leaves no compiler's temporary files behind (the process waits).
        thread = threading.Thread(target=self._run, name=self.name)
        self._pending.append(thread)
        thread.start()

    def wait(self) -> None:
        """Until the work asked ahead is done (at once where none was asked, or it was waited for already)."""
        while self._pending:
            try:
                thread = self._pending.pop()
            except IndexError:  # another thread took it meanwhile: the answers are there once either has joined
                return
            if thread is not threading.current_thread():
                thread.join()

    def _run(self) -> None:
        for work in self.work:
            work()
