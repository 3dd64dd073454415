"""The VPC: private subnets for nodes in every AZ, NAT gateways, and the endpoints a private
cluster needs (S3 gateway; ECR, STS, CloudWatch Logs, EC2 and EKS Auth interfaces).

Nodes pull images and reach S3 through the endpoints, so bulk traffic skips the NAT gateway;
`eks-auth` serves Pod Identity credentials, `ec2` the VPC CNI and autoscaler, `logs` the log
agents. GPU node groups use the private subnet of one AZ only (EFA and cluster placement groups
don't span AZs). With `natGateways: perZone` (prod) every AZ has its own NAT gateway and routes,
so losing one AZ's NAT doesn't cut the others (the GPU AZ included) off; `single` (dev) puts one
NAT in the GPU AZ.
"""

from __future__ import annotations

import ipaddress

import pulumi
import pulumi_aws as aws

from infra.settings.types import NetworkConfig

MAX_ZONES = 7
"""The VPC is cut into 8 equal blocks: one private block per AZ, the last for public subnets."""
INTERFACE_ENDPOINTS = ("ecr.api", "ecr.dkr", "sts", "logs", "ec2", "eks-auth")


def subnet_layout(vpc_cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """(private, public) CIDRs: large private subnets (pods take VPC IPs), small public ones."""
    network = ipaddress.IPv4Network(vpc_cidr)
    blocks = list(network.subnets(prefixlen_diff=3))
    public = list(blocks[-1].subnets(prefixlen_diff=3))
    return [str(b) for b in blocks[:zones]], [str(b) for b in public[:zones]]


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: list[pulumi.Output[str]]
    gpu_subnet_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        config: NetworkConfig,
        region: str,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        private_cidrs, public_cidrs = subnet_layout(config.vpc_cidr, len(config.availability_zones))

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=config.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": name},
            opts=child,
        )
        # The VPC's default security group admits nothing: every rule here is explicit.
        aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, opts=child)
        gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, opts=child)

        public_routes = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": gateway.id}],
            opts=child,
        )
        public_subnets = {
            zone: _routed_subnet(
                f"{name}-public-{zone}",
                vpc.id,
                cidr,
                zone,
                public_routes,
                {"kubernetes.io/role/elb": "1"},
                child,
            )
            for zone, cidr in zip(config.availability_zones, public_cidrs, strict=True)
        }

        nat_zones = (
            config.availability_zones if config.nat_per_zone else (config.gpu_availability_zone,)
        )
        private_routes = {}
        for zone in nat_zones:
            # Stacks from before per-zone NAT had one NAT (and route table) in the first zone
            # under the unsuffixed names: adopt them instead of replacing them.
            def known_as(old: str, zone: str = zone) -> pulumi.ResourceOptions:
                first = zone == config.availability_zones[0]
                return pulumi.ResourceOptions(aliases=[pulumi.Alias(name=old)] if first else [])

            nat_ip = aws.ec2.Eip(
                f"{name}-nat-{zone}",
                domain="vpc",
                opts=pulumi.ResourceOptions.merge(child, known_as(f"{name}-nat")),
            )
            nat = aws.ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=nat_ip.id,
                subnet_id=public_subnets[zone].id,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]).merge(
                    known_as(f"{name}-nat")
                ),
            )
            private_routes[zone] = aws.ec2.RouteTable(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                opts=pulumi.ResourceOptions.merge(child, known_as(f"{name}-private")),
            )
        private_subnets = {
            zone: _routed_subnet(
                f"{name}-private-{zone}",
                vpc.id,
                cidr,
                zone,
                private_routes.get(zone, private_routes[config.gpu_availability_zone]),
                {"kubernetes.io/role/internal-elb": "1"},
                child,
            )
            for zone, cidr in zip(config.availability_zones, private_cidrs, strict=True)
        }

        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[t.id for t in private_routes.values()],
            opts=child,
        )
        endpoint_sg = aws.ec2.SecurityGroup(
            f"{name}-endpoints",
            vpc_id=vpc.id,
            description="HTTPS from the VPC to interface endpoints",
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-endpoints-https",
            security_group_id=endpoint_sg.id,
            cidr_ipv4=config.vpc_cidr,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            opts=child,
        )
        for service in INTERFACE_ENDPOINTS:
            aws.ec2.VpcEndpoint(
                f"{name}-{service.replace('.', '-')}",
                vpc_id=vpc.id,
                service_name=f"com.amazonaws.{region}.{service}",
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                subnet_ids=[s.id for s in private_subnets.values()],
                security_group_ids=[endpoint_sg.id],
                opts=child,
            )

        self.vpc_id = vpc.id
        self.private_subnet_ids = [s.id for s in private_subnets.values()]
        self.gpu_subnet_id = private_subnets[config.gpu_availability_zone].id
        self.register_outputs({"vpc_id": self.vpc_id, "gpu_subnet_id": self.gpu_subnet_id})


def _routed_subnet(
    name: str,
    vpc_id: pulumi.Input[str],
    cidr: str,
    zone: str,
    routes: aws.ec2.RouteTable,
    role_tags: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> aws.ec2.Subnet:
    """A subnet in one zone (never assigning public IPs at launch), joined to its route table."""
    subnet = aws.ec2.Subnet(
        name,
        vpc_id=vpc_id,
        cidr_block=cidr,
        availability_zone=zone,
        map_public_ip_on_launch=False,
        tags={"Name": name, **role_tags},
        opts=opts,
    )
    aws.ec2.RouteTableAssociation(name, subnet_id=subnet.id, route_table_id=routes.id, opts=opts)
    return subnet
