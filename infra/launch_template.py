"""Launch template pieces shared by node groups, as plain functions (easy to test alone).

EFA layout follows AWS's guidance for multi-card instances: the primary interface is an `efa`
interface (EFA with ENA, so the node has IP networking) on network card 0 / device index 0;
every further card gets one `efa-only` interface at device index 1, so p5.48xlarge has 32
interfaces and only one consumes a VPC IP.
"""

from __future__ import annotations

import base64

import pulumi

from catalog import InstanceType
from catalog.pods import HUGEPAGES_2MI

ROOT_DEVICE = "/dev/xvda"
"""The root device name of the EKS AL2023 AMIs."""


def root_volume(size_gib: int) -> dict:
    return {
        "device_name": ROOT_DEVICE,
        "ebs": {
            "volume_size": size_gib,
            "volume_type": "gp3",
            "encrypted": "true",
            "delete_on_termination": "true",
        },
    }


def hugepages_user_data() -> str:
    """Base64 MIME user data that EKS merges with its own: a script reserving the hugepages
    before nodeadm starts the kubelet (which reads them once, at start)."""
    pages = int(HUGEPAGES_2MI.removesuffix("Mi")) // 2
    script = (
        "#!/bin/bash\nset -euo pipefail\n"
        f"echo 'vm.nr_hugepages = {pages}' > /etc/sysctl.d/90-trainstack-hugepages.conf\n"
        f"sysctl -w vm.nr_hugepages={pages}\n"
    )
    boundary = "==TRAINSTACK=="
    mime = (
        f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{boundary}"\n\n'
        f'--{boundary}\nContent-Type: text/x-shellscript; charset="us-ascii"\n\n'
        f"{script}\n--{boundary}--\n"
    )
    return base64.b64encode(mime.encode()).decode()


def metadata_options(hop_limit: int) -> dict:
    """IMDSv2 only. A hop limit of 1 keeps pods (one hop further) away from node credentials."""
    return {
        "http_endpoint": "enabled",
        "http_tokens": "required",
        "http_put_response_hop_limit": hop_limit,
    }


def efa_network_interfaces(
    instance: InstanceType,
    efa_security_group_id: pulumi.Input[str],
    cluster_security_group_id: pulumi.Input[str],
) -> list[dict]:
    """One interface per EFA the instance supports, one per network card."""
    if not instance.has_efa:
        return [
            {
                "network_card_index": 0,
                "device_index": 0,
                "interface_type": "interface",
                "security_groups": [cluster_security_group_id],
                "delete_on_termination": "true",
            }
        ]
    interfaces = []
    for card in range(instance.efa_interfaces):
        primary = card == 0
        interfaces.append(
            {
                "network_card_index": card,
                "device_index": 0 if primary else 1,
                "interface_type": "efa" if primary else "efa-only",
                # Pod and control-plane traffic uses the primary interface only.
                "security_groups": (
                    [cluster_security_group_id, efa_security_group_id]
                    if primary
                    else [efa_security_group_id]
                ),
                "delete_on_termination": "true",
            }
        )
    return interfaces
