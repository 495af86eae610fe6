"""gpulab validation suite: `pytest validate/ [--tier quick|standard|full] [--gpus all|N|i,j] [--baseline FILE]`.

Everything lives in the gpulab.validation.plugin module; this file only loads it for this directory.
"""

from gpulab.validation.plugin import *  # noqa: F403  (pytest finds hooks and fixtures by name here)
