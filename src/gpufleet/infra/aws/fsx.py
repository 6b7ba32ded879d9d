"""The shared file system: FSx for Lustre in the cluster's subnet.

Creates, when ``filesystem.kind`` is ``fsx_lustre``:
- ``<name>-fsx``: the file system (PERSISTENT_2 with its ``per_unit_storage_throughput``, or SCRATCH_2),
  Lustre 2.15, SSD, in the private subnet behind ``<name>-fsx-sg``. Encrypted at rest: PERSISTENT_2 with
  the AWS managed key ``aws/fsx`` (no ``kms_key_id`` given), SCRATCH_2 always, with keys FSx manages.
  No automatic backups and no final backup, so that destroy leaves nothing behind. LZ4 data compression
  unless ``compression: NONE``. With ``efa: true`` (PERSISTENT_2), EFA and GPUDirect Storage with an
  automatic metadata configuration, as FSx requires for them (FSX_EFA_DOC); the security groups then
  allow all traffic between the file system and the nodes (``security.py``).
- ``<name>-fsx-dra``: with ``data_repository``, an S3 data repository association (any Lustre 2.12+
  deployment but SCRATCH_1 supports one).

The size was checked against ``rules.fsx_size_ok`` by the preflight checks before anything was created.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from gpufleet.spec.model import FsxLustreFilesystem

EVENTS = ["NEW", "CHANGED", "DELETED"]
FSX_EFA_DOC = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/efa-file-systems.html"


def build_fsx(
    name: str,
    fs: FsxLustreFilesystem,
    subnet_id: pulumi.Input[str],
    security_group_id: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> aws.fsx.LustreFileSystem:
    persistent = fs.deployment_type == "PERSISTENT_2"
    lustre = aws.fsx.LustreFileSystem(
        f"{name}-fsx",
        deployment_type=fs.deployment_type,
        storage_type="SSD",
        storage_capacity=fs.size_gib,
        per_unit_storage_throughput=fs.throughput_per_tib if persistent else None,
        file_system_type_version="2.15",
        subnet_ids=subnet_id,  # one subnet: a str in pulumi-aws 7
        security_group_ids=[security_group_id],
        automatic_backup_retention_days=0 if persistent else None,
        skip_final_backup=True if persistent else None,
        data_compression_type=fs.compression,
        efa_enabled=True if fs.efa else None,
        metadata_configuration=(
            aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="AUTOMATIC") if fs.efa else None
        ),
        tags={"Name": f"{name}-fsx"},
        opts=opts,
    )
    repo = fs.data_repository
    if repo is not None:
        aws.fsx.DataRepositoryAssociation(
            f"{name}-fsx-dra",
            file_system_id=lustre.id,
            data_repository_path=repo.s3_path,
            file_system_path=repo.file_system_path,
            batch_import_meta_data_on_create=repo.import_metadata,
            s3=aws.fsx.DataRepositoryAssociationS3Args(
                auto_import_policy=(
                    aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=EVENTS)
                    if repo.import_metadata
                    else None
                ),
                auto_export_policy=(
                    aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=EVENTS)
                    if repo.auto_export
                    else None
                ),
            ),
            delete_data_in_filesystem=False,
            opts=opts,
        )
    return lustre
