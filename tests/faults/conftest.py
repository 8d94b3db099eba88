"""The fault suite (make test-faults): processes that die, restart and are
fed hostile inputs.  Every test launches its processes with a deadline and
kills their whole session on the way out (tests/python/dist_util.py), so a
hang is a failure with the ranks' logs, never a stuck suite."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # dist_util

import torch_tpu  # noqa: E402,F401
