"""`python -m grader.execute.cpu JOB_FILE EVENT_FD CONTROL_FD`: the CPU driver (harness_driver.py), started as an
imported module (its bytecode kept like any other's) with its imports' collections paused (grader/startup.py)."""
import sys

from ...startup import cpu_driver

sys.exit(cpu_driver())
