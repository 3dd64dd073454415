"""The instance catalog: the one place facts about AWS instance types live.

Read by `jobs` (resources, NCCL/EFA environment, cost estimates) and by `infra` (launch
templates, node groups, stack cost). Keep it free of heavy imports: both sides import it at
start-up.
"""

from catalog.instances import INSTANCE_TYPES, SPOT_DISCOUNT, InstanceType, get_instance_type

__all__ = ["INSTANCE_TYPES", "SPOT_DISCOUNT", "InstanceType", "get_instance_type"]
