import sys

from .startup import grade

sys.exit(grade())
