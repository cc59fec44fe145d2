"""TorchX's builtin components as Python functions (``torchx.components``).

``dist.ddp(...)`` and the others return the AppDef that ``trun run dist.ddp
...`` builds: each call asks the trun binary (``trun run --dryrun --json``),
so the command, its defaults and its checks are the C++ builtin's, not a
second copy. Arguments are TorchX's; ``image=None`` and ``name=None`` mean
the builtin's own default.
"""

from trun.components._builtin import builtin as builtin
from trun.components._builtin import options_argv as options_argv
from trun.components._builtin import word as word
