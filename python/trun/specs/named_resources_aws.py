"""TorchX's ``torchx.specs.named_resources_aws``: AWS instance types as Resources.

The sizes are trun's table (``trun builtins --resources``, the same the
command line uses), read from the binary on first use; each ``aws_X`` of
TorchX is a function returning a fresh Resource (``aws_p4d_24xlarge()`` is
``named_resources["aws_p4d.24xlarge"]``).
"""

import re
import warnings
from typing import Callable, Optional

from trun.specs.api import GiB, Resource, _NamedResourceFactories

EFA_DEVICE = "vpc.amazonaws.com/efa"
NEURON_DEVICE = "aws.amazon.com/neurondevice"
# The share of an instance's memory a job may ask for (AWS Batch's hard limit).
MEM_TAX = 0.96
# The capability that names the instance type (for mixed compute environments).
K8S_ITYPE = "node.kubernetes.io/instance-type"

NAMED_RESOURCES = _NamedResourceFactories(lambda name: name.startswith("aws_"))

__all__ = ["EFA_DEVICE", "NEURON_DEVICE", "MEM_TAX", "K8S_ITYPE", "GiB", "NAMED_RESOURCES",
           "instance_type_from_resource"]


def instance_type_from_resource(resource: Resource) -> Optional[str]:
    """The instance type a Resource names (its ``K8S_ITYPE`` capability), warning when none."""
    instance_type = resource.capabilities.get(K8S_ITYPE)
    if instance_type is None:
        warnings.warn("Cannot determine resource instance type which can cause issues for "
                      "non-homogeneous CEs and multinode jobs. Consider providing "
                      "torchx.specs.named_resources_aws:K8S_ITYPE resource capability.",
                      stacklevel=2)
    return instance_type


def __getattr__(attr: str) -> Callable[[], Resource]:
    # aws_p6_b200_48xlarge is the table's aws_p6-b200.48xlarge.
    if attr.startswith("aws_"):
        for name in NAMED_RESOURCES:
            if re.sub(r"[.-]", "_", name) == attr:
                return NAMED_RESOURCES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
