"""EFA interfaces in the launch templates against AWS's own figures, not the catalog the code
reads: a wrong catalog entry (or a template that ignores it) fails here."""

from __future__ import annotations

import pytest

from catalog import INSTANCE_TYPES
from tests.infra.pulumi_harness import one_group_run
from tests.infra.test_infra_stack import gpu_node_groups, gpu_templates

AWS_EFA_FIGURES = {
    # instance type: (maximum EFA interfaces, network cards), from the Amazon EC2 instance type
    # specifications (accelerated computing, "Network specifications": EFA and network cards)
    # and the EFA user guide's multi-card examples (p5: 32 EFA devices).
    "g5.12xlarge": (1, 1),
    "g5.48xlarge": (1, 1),
    "g6e.48xlarge": (4, 4),
    "p4d.24xlarge": (4, 4),
    "p4de.24xlarge": (4, 4),
    "p5.48xlarge": (32, 32),
    "p5e.48xlarge": (32, 32),
    "p5en.48xlarge": (16, 16),
}


def test_every_catalog_type_has_an_aws_figure():
    assert set(AWS_EFA_FIGURES) == set(INSTANCE_TYPES)


@pytest.mark.parametrize("instance_type", sorted(AWS_EFA_FIGURES))
def test_launch_template_has_one_efa_per_card(instance_type):
    run = one_group_run(instance_type)  # one GPU group of this type on the dev stack
    (template,) = gpu_templates(run)
    (group,) = gpu_node_groups(run)
    assert group.inputs["instanceTypes"] == [instance_type]
    interfaces = template.inputs["networkInterfaces"]
    efa_interfaces, cards = AWS_EFA_FIGURES[instance_type]
    efa = [i for i in interfaces if i["interfaceType"] in ("efa", "efa-only")]
    assert len(efa) == efa_interfaces
    assert {int(i["networkCardIndex"]) for i in interfaces} == set(range(cards))
