"""Optional FSx for Lustre (PERSISTENT_2) in the GPU AZ, linked to the runs bucket by a data
repository association, and mounted in pods through a static PV/PVC of the FSx CSI driver.

The bucket is SSE-KMS with the stack's key, so lazy loads and exports work only once the key
policy lets the file system's S3-access service-linked role use the key through S3 for this
bucket: the policy is set once the link exists (the role is created with it and named after the
file system).
FSx backups are not available on a file system linked to S3; protection and S3 versioning are
the safety net."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.policies import bucket_key_policy
from infra.protection import stateful
from infra.settings.types import DataProtection, FsxConfig
from infra.storage import BUCKET_KEYS

LUSTRE_PORTS = ((988, 988), (1018, 1023))
"""TCP ports Lustre clients and servers use (FSx for Lustre security group guidance)."""
CSI_DRIVER = "fsx.csi.aws.com"
CLAIM_NAME = "shared-data"


@dataclass(frozen=True)
class KeyOwner:
    """Where the bucket's key lives: what its key policy names."""

    partition: str
    account_id: str
    region: str


class SharedFileSystem(pulumi.ComponentResource):
    claim_name: str

    def __init__(
        self,
        name: str,
        config: FsxConfig,
        vpc_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        client_security_group_id: pulumi.Input[str],
        bucket: pulumi.Input[str],
        bucket_arn: pulumi.Input[str],
        kms_key_arn: pulumi.Input[str],
        kms_key_id: pulumi.Input[str],
        account: KeyOwner,
        protection: DataProtection,
        namespace: pulumi.Input[str],
        k8s_provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("trainstack:infra:SharedFileSystem", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=k8s_provider)

        fsx_sg = aws.ec2.SecurityGroup(
            f"{name}-lustre",
            vpc_id=vpc_id,
            description="Lustre traffic between FSx and cluster nodes",
            opts=child,
        )
        # Lustre needs its ports open from clients and between file servers, and servers also
        # open connections back to clients on the same ports.
        for source, group_id in (("self", fsx_sg.id), ("nodes", client_security_group_id)):
            _allow_lustre_ports(
                aws.vpc.SecurityGroupIngressRule,
                f"{name}-lustre-{source}",
                fsx_sg.id,
                group_id,
                child,
            )
        _allow_lustre_ports(
            aws.vpc.SecurityGroupEgressRule,
            f"{name}-lustre-nodes-out",
            fsx_sg.id,
            client_security_group_id,
            child,
        )
        _allow_lustre_ports(
            aws.vpc.SecurityGroupIngressRule,
            f"{name}-nodes-from-lustre",
            client_security_group_id,
            fsx_sg.id,
            child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-lustre-self-out",
            security_group_id=fsx_sg.id,
            referenced_security_group_id=fsx_sg.id,
            ip_protocol="-1",
            opts=child,
        )

        file_system = aws.fsx.LustreFileSystem(
            f"{name}-lustre",
            deployment_type="PERSISTENT_2",
            storage_capacity=config.storage_capacity_gib,
            per_unit_storage_throughput=config.throughput_per_tib,
            subnet_ids=subnet_id,  # one subnet: a str in pulumi-aws v7
            security_group_ids=[fsx_sg.id],
            kms_key_id=kms_key_arn,
            data_compression_type="LZ4",
            file_system_type_version="2.15",
            opts=stateful(self, protection),
        )
        link = aws.fsx.DataRepositoryAssociation(
            f"{name}-data",
            file_system_id=file_system.id,
            file_system_path=f"/{config.data_prefix}",
            data_repository_path=pulumi.Output.concat("s3://", bucket, f"/{config.data_prefix}/"),
            batch_import_meta_data_on_create=True,
            s3={
                "auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
                "auto_export_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
            },
            opts=child,
        )

        # After the link: FSx creates the S3-access role with it, and KMS refuses a policy naming
        # a role that does not exist. Until then the file system is empty, so nothing is
        # exported, and importing metadata needs no decryption.
        aws.kms.KeyPolicy(
            f"{name}-bucket-key",
            key_id=kms_key_id,
            policy=pulumi.Output.all(bucket_arn, file_system.id).apply(
                lambda args: bucket_key_policy(
                    account.partition,
                    account.account_id,
                    account.region,
                    args[0],
                    bucket_keys=BUCKET_KEYS,
                    fsx_file_system_id=args[1],
                )
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[link]),
        )
        storage_class = k8s.storage.v1.StorageClass(
            f"{name}-fsx",
            metadata={"name": "fsx-lustre"},
            provisioner=CSI_DRIVER,
            reclaim_policy="Retain",
            opts=in_cluster,
        )
        size = f"{config.storage_capacity_gib}Gi"
        volume = k8s.core.v1.PersistentVolume(
            f"{name}-fsx",
            metadata={"name": f"{name}-fsx"},
            spec={
                "capacity": {"storage": size},
                "volume_mode": "Filesystem",
                "access_modes": ["ReadWriteMany"],
                "persistent_volume_reclaim_policy": "Retain",
                "storage_class_name": storage_class.metadata.name,
                "csi": {
                    "driver": CSI_DRIVER,
                    "volume_handle": file_system.id,
                    "volume_attributes": {
                        "dnsname": file_system.dns_name,
                        "mountname": file_system.mount_name,
                    },
                },
            },
            opts=in_cluster,
        )
        k8s.core.v1.PersistentVolumeClaim(
            f"{name}-fsx",
            metadata={"name": CLAIM_NAME, "namespace": namespace},
            spec={
                "access_modes": ["ReadWriteMany"],
                "storage_class_name": storage_class.metadata.name,
                "volume_name": volume.metadata.name,
                "resources": {"requests": {"storage": size}},
            },
            opts=in_cluster,
        )
        self.claim_name = CLAIM_NAME
        self.file_system_id = file_system.id
        self.register_outputs({"file_system_id": self.file_system_id})


def _allow_lustre_ports(
    rule: type[aws.vpc.SecurityGroupIngressRule] | type[aws.vpc.SecurityGroupEgressRule],
    name: str,
    group_id: pulumi.Input[str],
    peer_group_id: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> None:
    """One `rule` (ingress or egress of `group_id`, to or from `peer_group_id`) per Lustre port
    range, each named `<name>-<first port>`."""
    for low, high in LUSTRE_PORTS:
        rule(
            f"{name}-{low}",
            security_group_id=group_id,
            referenced_security_group_id=peer_group_id,
            ip_protocol="tcp",
            from_port=low,
            to_port=high,
            opts=opts,
        )
