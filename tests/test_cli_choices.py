"""The command line answers --help and usage errors without importing torch, and the
names it offers are those of the stack it builds."""
import subprocess
import sys

from rlframe.cli.choices import (ALGO_NAMES, AUTOTUNE_BACKENDS, SAMPLER_NAMES, SECTIONS,
                                  SNAPSHOT_MODES)
from rlframe.presets import ALGOS, SAMPLERS
from rlframe.presets import SECTIONS as PRESET_SECTIONS
from rlframe.presets.autotune import BACKEND_CHOICES, SAMPLER_CHOICES
from rlframe.utils.logging.logger import SNAPSHOT_MODES as LOGGER_SNAPSHOT_MODES

PROBE = """
import sys
from rlframe.cli import main
for argv in (["--help"], ["train", "--help"], ["evaluate", "--help"], ["resume", "--help"],
             ["plot", "--help"], ["autotune", "--help"], ["train"], ["train", "ppo"],
             ["evaluate"], ["autotune", "ppo", "pong", "--samplers", "ray"]):
    code = main(argv)
    assert code in (0, 2), (argv, code)
heavy = sorted(m for m in ("torch", "numpy", "gymnasium", "matplotlib") if m in sys.modules)
print("HEAVY", heavy)
"""


def test_help_and_usage_errors_import_no_heavy_module():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "HEAVY []" in done.stdout, done.stdout[-500:]


def test_the_offered_names_are_the_stacks():
    assert ALGO_NAMES == tuple(ALGOS)
    assert SAMPLER_NAMES == tuple(SAMPLERS) == SAMPLER_CHOICES
    assert AUTOTUNE_BACKENDS == BACKEND_CHOICES
    assert SECTIONS == PRESET_SECTIONS
    assert SNAPSHOT_MODES == LOGGER_SNAPSHOT_MODES
    from rlframe.cli.choices import TRACKERS
    from rlframe.utils.logging.tracking import TRACKERS as TRACKING_TRACKERS
    assert TRACKERS == TRACKING_TRACKERS
