"""TorchX's ``torchx.components.structured_arg``: component arguments that hold
several values (``--name EXPERIMENT/RUN``, ``-j NNODESxNPROC``), read the same
way by every component that takes them (trun's builtins read them in C++ with
the same rules)."""

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from trun import specs


@dataclass
class StructuredNameArgument:
    experiment_name: str
    run_name: str

    def __str__(self) -> str:
        return f"{self.experiment_name or ''}/{self.run_name}"

    @staticmethod
    def parse_from(name: str, m: Optional[str] = None, script: Optional[str] = None,
                   default_experiment_name: str = "default-experiment"
                   ) -> "StructuredNameArgument":
        """``EXPERIMENT/RUN``, ``EXPERIMENT/``, ``/RUN`` or ``RUN``: an empty run name
        is the script's file name without extension or the module's last part
        (exactly one of ``m`` and ``script`` is given), an empty experiment name
        ``default_experiment_name``."""
        if not m and not script:
            raise ValueError("No main module or script specified. Specify either a main "
                             "module or a script path")
        if m and script:
            raise ValueError("Both main module and script set. Specify exactly one of: main "
                             "module or script, but not both")
        experiment, slash, run = name.partition("/")
        if not slash:  # no "/": the whole name is the run's
            experiment, run = "", name
        if not run:
            run = m.rpartition(".")[2] if m else Path(script or "").stem
        return StructuredNameArgument(experiment or default_experiment_name, run)


@dataclass
class StructuredJArgument:
    nnodes: int
    nproc_per_node: int

    def __str__(self) -> str:
        return f"{self.nnodes}x{self.nproc_per_node}"

    @staticmethod
    def parse_from(h: str, j: str) -> "StructuredJArgument":
        """``-j NNODES`` (one process per GPU of the named resource ``h``) or
        ``-j NNODESxNPROC`` (warning when NPROC is not ``h``'s GPU count)."""
        parts = j.split("x")
        gpus = specs.named_resources[h].gpu
        if len(parts) == 1:
            nnodes = int(parts[0])
            if gpus <= 0:
                raise ValueError(f"nproc_per_node cannot be inferred from GPU count. `{h}` is "
                                 f"not a GPU instance. You must specify "
                                 f"`-j $NNODESx$NPROCS_PER_NODE` (e.g. `-j {nnodes}x8`)")
            return StructuredJArgument(nnodes, gpus)
        if len(parts) != 2:
            raise ValueError(f"Invalid format for `-j $NNODESx$NPROCS_PER_NODE` (e.g. `-j 1x8`). "
                             f"Given: {j}")
        nnodes, nproc = int(parts[0]), int(parts[1])
        if nproc != gpus:
            warnings.warn(f"In `-j {j}` you specified nproc_per_node={nproc} which does not "
                          f"equal the number of GPUs on a {h}: {gpus}. This may lead to "
                          f"under-utilization or an error. If this was intentional, ignore "
                          f"this warning. Otherwise set `-j {nnodes}` to auto-set "
                          f"nproc_per_node to the number of GPUs on the host.")
        return StructuredJArgument(nnodes, nproc)
