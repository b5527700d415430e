"""dlrun TensorFlow 2 harness: what every part shares - exit codes, the
error type, the output helpers.  Standard library only.

Shipped into containers next to ``harness_tensorflow.py`` (see its notes);
runs on Python >= 3.6.
"""

import sys

HARNESS_VERSION = "1"
ERROR_PREFIX = "dlrun-harness: error: "
PERTURB_ENV = "DLRUN_HARNESS_TEST_PERTURB_RANK"
NUM_CLASSES = 1000
REPLICA_RTOL = 1e-6
RULE = "-" * 64

EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_WORLD_SIZE = 3
EXIT_DIVERGED = 4
EXIT_NONFINITE = 5


class HarnessError(Exception):
    """An anticipated failure: reported as one line, exits with ``code``."""

    def __init__(self, message, code=EXIT_USAGE):
        Exception.__init__(self, message)
        self.message = message
        self.code = code


def out(line=""):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def error_line(message):
    message = " ".join(str(message).split())  # always exactly one line
    sys.stderr.write(ERROR_PREFIX + message + "\n")
    sys.stderr.flush()
