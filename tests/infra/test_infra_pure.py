"""The plain functions behind the components: subnet layout, interfaces, policies."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from itertools import combinations

import pytest

from catalog import INSTANCE_TYPES
from infra.launch_template import efa_network_interfaces
from infra.network import subnet_layout
from infra.policies import codebuild_policy


@pytest.mark.parametrize("zones", range(2, 8))
@pytest.mark.parametrize("vpc", ["10.0.0.0/16", "172.16.0.0/20"])
def test_subnets_are_disjoint_and_inside_the_vpc(vpc, zones):
    private, public = subnet_layout(vpc, zones)
    assert len(private) == len(public) == zones
    networks = [ipaddress.IPv4Network(c) for c in private + public]
    assert all(n.subnet_of(ipaddress.IPv4Network(vpc)) for n in networks)
    assert not any(a.overlaps(b) for a, b in combinations(networks, 2))
    assert all(
        n.num_addresses > 4 * m.num_addresses for n in networks[:zones] for m in networks[zones:]
    )


def test_instance_without_efa_gets_one_plain_interface():
    no_efa = dataclasses.replace(INSTANCE_TYPES["g5.12xlarge"], efa_interfaces=0)
    (interface,) = efa_network_interfaces(no_efa, "sg-efa", "sg-cluster")
    assert interface["interface_type"] == "interface"
    assert interface["security_groups"] == ["sg-cluster"]


def test_codebuild_connection_is_scoped_to_its_arn():
    arn = "arn:aws:codeconnections:us-east-1:123456789012:connection/abc"
    statements = json.loads(codebuild_policy("arn:repo", "arn:logs", arn))["Statement"]
    connection = next(s for s in statements if s.get("Sid") == "GitHubConnection")
    assert connection["Resource"] == arn
    without = json.loads(codebuild_policy("arn:repo", "arn:logs"))["Statement"]
    assert not any(s.get("Sid") == "GitHubConnection" for s in without)
